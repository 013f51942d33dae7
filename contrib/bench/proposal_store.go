package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// protoStore prototypes a proposed change to postgres.Store's relay side,
// for the drain workload's -proposals rows: settle by row address. It
// covers only what a drain exercises (no ordering, no destination, system
// clock, every event published) and hands anything else to the real store.
//
// Claim returns each leased row's ctid (the HOT lease update leaves the new
// version there, and nothing else updates a leased row), and the publish
// statement finds rows with a TID scan instead of a primary-key probe per
// event. The lease token stays the fence: a row another relay re-claimed
// has another token, so it is not matched. Should a row have moved while
// keeping the token (nothing in outboxkit does that), it is settled by ID
// through the real store. Like the store, it implements core.SettleClaimer
// (settle and next claim in one pgx batch), so core.Relay pipelines over
// it exactly as over postgres.Store.
//
// It does not change the lease protocol: every event is still leased under
// a token before it is published and settled only where the token matches.
type protoStore struct {
	real *postgres.Store
	pool *pgxpool.Pool

	claimSQL, settleSQL string

	mu   sync.Mutex
	tids map[core.ID]pgtype.TID // row address of each leased event
}

var _ core.SettleClaimer = (*protoStore)(nil)

// protoSettle is what the prototype's settlement does with a published row.
type protoSettle int

const (
	settleUpdate  protoSettle = iota // stamp published_at, as the store does
	settleDelete                     // delete it (Config.DeletePublished)
	settleArchive                    // move it to an append-only archive table
)

// archiveTable is the archive of settleArchive, beside the outbox.
const archiveTable = "outbox_events_archive"

// createArchive creates the archive table of settleArchive: the outbox's
// columns, a primary key (replay and inspection find events by ID; UUID v7
// keys append at the index's right edge) and no other index, so moving a
// row costs one heap insert and one key insert instead of an update that
// maintains the outbox's indexes.
func createArchive(ctx context.Context, s *schema) error {
	_, err := s.pool.Exec(ctx, `CREATE TABLE `+s.table(archiveTable)+` (LIKE `+s.table(postgres.DefaultTable)+` INCLUDING DEFAULTS);
ALTER TABLE `+s.table(archiveTable)+` ADD PRIMARY KEY (id)`)
	return err
}

func newProtoStore(ctx context.Context, pool *pgxpool.Pool, s *schema, mode protoSettle) (*protoStore, error) {
	if mode == settleArchive {
		if err := createArchive(ctx, s); err != nil {
			return nil, err
		}
	}
	real, err := postgres.New(pool, &postgres.Config{Schema: s.name, Notify: postgres.NotifyOff, DeletePublished: mode == settleDelete})
	if err != nil {
		return nil, err
	}
	t := s.table(postgres.DefaultTable)
	// The store's claim (postgres/sql.go, claimSQL without ordering or
	// destination, on the database clock) plus the leased row's ctid.
	claim := `UPDATE ` + t + ` t
SET lease_token = $2, lease_until = now() + $3::interval, attempts = t.attempts + 1
WHERE t.ctid = ANY(ARRAY(
	SELECT o.ctid FROM ` + t + ` o
	WHERE o.published_at IS NULL AND o.dead_at IS NULL
		AND o.available_at <= now()
		AND (o.lease_until IS NULL OR o.lease_until <= now())
	ORDER BY o.available_at, o.pos
	LIMIT $1
	FOR UPDATE SKIP LOCKED))
RETURNING t.id, t.event_type, t.schema_version, t.source, t.aggregate_type, t.aggregate_id, t.sequence,
	t.payload, t.headers, t.destination, t.created_at, t.available_at, t.attempts, t.lease_until, t.pos, t.ctid`
	settle := `UPDATE ` + t + ` t SET published_at = now(), lease_token = NULL, lease_until = NULL
WHERE t.ctid = ANY($2::tid[]) AND t.lease_token = $1
RETURNING t.id`
	switch mode {
	case settleDelete:
		settle = `DELETE FROM ` + t + ` t WHERE t.ctid = ANY($2::tid[]) AND t.lease_token = $1 RETURNING t.id`
	case settleArchive:
		// One statement: the rows leave the outbox (which stays as small
		// as the backlog) and land in the archive with published_at set.
		cols := `id, event_type, schema_version, payload, created_at, attempts, last_error, source, aggregate_type,
	aggregate_id, sequence, headers, destination, available_at, dead_at, pos`
		settle = `WITH d AS (
DELETE FROM ` + t + ` t WHERE t.ctid = ANY($2::tid[]) AND t.lease_token = $1
RETURNING ` + prefixCols("t.", cols) + `
)
INSERT INTO ` + s.table(archiveTable) + ` (` + cols + `, published_at)
SELECT ` + cols + `, now() FROM d
RETURNING id`
	}
	return &protoStore{real: real, pool: pool, claimSQL: claim, settleSQL: settle, tids: make(map[core.ID]pgtype.TID)}, nil
}

func (p *protoStore) claimArgs(req core.ClaimRequest) (core.ID, []any) {
	token := core.NewID()
	return token, []any{req.Limit, pgtype.UUID{Bytes: token, Valid: true}, req.LeaseFor}
}

// readClaim reads the claim's rows, oldest first, and remembers their
// addresses.
func (p *protoStore) readClaim(rows pgx.Rows, token core.ID, limit int) (core.Batch, error) {
	type claimed struct {
		pos int64
		ev  core.Event
		tid pgtype.TID
	}
	out := make([]claimed, 0, limit)
	var (
		until   time.Time
		id      pgtype.UUID
		version int32
		seq     pgtype.Int8
		headers []byte
		att     int32
	)
	for rows.Next() {
		var c claimed
		e := &c.ev
		if err := rows.Scan(&id, &e.Type, &version, &e.Source, &e.AggregateType, &e.AggregateID, &seq,
			(*[]byte)(&e.Payload), &headers, &e.Destination, &e.CreatedAt, &e.AvailableAt, &att, &until, &c.pos, &c.tid); err != nil {
			return core.Batch{}, err
		}
		e.ID, e.SchemaVersion, e.Attempts = id.Bytes, int(version), int(att)
		if seq.Valid {
			e.Sequence = seq.Int64
		}
		if len(headers) > 2 {
			_ = json.Unmarshal(headers, &e.Headers)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return core.Batch{}, err
	}
	// The store sorts by (available_at, pos) in Go; so does this.
	slices.SortFunc(out, func(a, b claimed) int {
		if c := a.ev.AvailableAt.Compare(b.ev.AvailableAt); c != 0 {
			return c
		}
		return cmpI64(a.pos, b.pos)
	})
	events := make([]core.Event, len(out))
	p.mu.Lock()
	for i := range out {
		events[i] = out[i].ev
		p.tids[out[i].ev.ID] = out[i].tid
	}
	p.mu.Unlock()
	return core.Batch{Lease: core.Lease{Token: token, Until: until}, Events: events}, nil
}

func (p *protoStore) Claim(ctx context.Context, req core.ClaimRequest) (core.Batch, error) {
	if req.Destination != "" || !req.Now.IsZero() {
		return p.real.Claim(ctx, req)
	}
	token, args := p.claimArgs(req)
	rows, err := p.pool.Query(ctx, p.claimSQL, args...)
	if err != nil {
		return core.Batch{}, err
	}
	defer rows.Close()
	return p.readClaim(rows, token, req.Limit)
}

// settleArgs returns the publish statement's arguments, or ok=false when
// the request is not "every event published" (the real store handles it).
func (p *protoStore) settleArgs(req core.SettleRequest) ([]any, bool) {
	if !req.Now.IsZero() {
		return nil, false
	}
	tids := make([]pgtype.TID, len(req.Outcomes))
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, o := range req.Outcomes {
		t, ok := p.tids[o.ID]
		if o.Kind != core.Published || !ok {
			return nil, false
		}
		tids[i] = t
	}
	for _, o := range req.Outcomes {
		delete(p.tids, o.ID)
	}
	return []any{pgtype.UUID{Bytes: req.Lease.Token, Valid: true}, tids}, true
}

// finishSettle reads the settled IDs and settles any event the address
// missed through the real store, by ID, which also reports lost leases.
func (p *protoStore) finishSettle(ctx context.Context, rows pgx.Rows, req core.SettleRequest) error {
	done := make(map[core.ID]struct{}, len(req.Outcomes))
	var id pgtype.UUID
	for rows.Next() {
		if err := rows.Scan(&id); err != nil {
			return err
		}
		done[id.Bytes] = struct{}{}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(done) == len(req.Outcomes) {
		return nil
	}
	rest := req
	rest.Outcomes = nil
	for _, o := range req.Outcomes {
		if _, ok := done[o.ID]; !ok {
			rest.Outcomes = append(rest.Outcomes, o)
		}
	}
	return p.real.Settle(ctx, rest)
}

func (p *protoStore) Settle(ctx context.Context, req core.SettleRequest) error {
	args, ok := p.settleArgs(req)
	if !ok {
		return p.real.Settle(ctx, req)
	}
	rows, err := p.pool.Query(ctx, p.settleSQL, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return p.finishSettle(ctx, rows, req)
}

// SettleAndClaim implements core.SettleClaimer: the settlement and the
// next claim in one round trip (one pgx batch, one implicit transaction),
// as postgres.Store does.
func (p *protoStore) SettleAndClaim(ctx context.Context, sreq core.SettleRequest, creq core.ClaimRequest) (core.Batch, error, error) {
	args, ok := p.settleArgs(sreq)
	if !ok || creq.Destination != "" || !creq.Now.IsZero() {
		return p.real.SettleAndClaim(ctx, sreq, creq)
	}
	token, cargs := p.claimArgs(creq)
	var b pgx.Batch
	b.Queue(p.settleSQL, args...)
	b.Queue(p.claimSQL, cargs...)
	br := p.pool.SendBatch(ctx, &b)
	rows, err := br.Query()
	var settleErr error
	if err == nil {
		settleErr = p.finishSettle(ctx, rows, sreq)
		rows.Close()
		if settleErr != nil && !errors.Is(settleErr, core.ErrLeaseLost) {
			err = settleErr
		}
	}
	if err != nil {
		err = fmt.Errorf("settle and claim: %w", errors.Join(err, br.Close()))
		return core.Batch{}, err, err
	}
	rows, err = br.Query()
	if err != nil {
		err = fmt.Errorf("settle and claim: %w", errors.Join(err, br.Close()))
		return core.Batch{}, err, err
	}
	next, claimErr := p.readClaim(rows, token, creq.Limit)
	rows.Close()
	if err := br.Close(); err != nil {
		err = fmt.Errorf("settle and claim: %w", err)
		return core.Batch{}, err, err
	}
	return next, settleErr, claimErr
}

func prefixCols(prefix, cols string) string {
	parts := strings.Split(cols, ",")
	for i, p := range parts {
		parts[i] = prefix + strings.TrimSpace(p)
	}
	return strings.Join(parts, ", ")
}

func cmpI64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
