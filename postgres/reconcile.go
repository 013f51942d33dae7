package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outboxkit/core"
)

// Reconciling: was every published event applied by a consumer?
//
// The outbox knows what it published; a consumer's Deduper (or Sequencer)
// knows what it applied, in the consumer's own database. Reconcile reads
// both, page by page, and reports the difference. Nothing is joined in
// SQL, so the two may live in different databases; nothing is held
// beyond one page, so a window of millions of events costs memory for
// PageSize of them.
//
//   - Published events are read in (published_at, id) order through the
//     published index, from Since on (an event is published after it was
//     written), keeping those created in the window. Each page's IDs are
//     looked up in the consumer's processed table by primary key (and,
//     for events that carry a sequence, in its Sequencer's table).
//   - Dead-lettered events are read in ID order through the dead-letter
//     index.
//   - The consumer's records processed in the window are read in
//     (processed_at, event_id) order through their processed_at index,
//     and each page's IDs are looked up in the outbox by primary key: a
//     record whose event the outbox does not hold is a phantom.

// TransportLog is what a transport remembers of the events handed to it:
// for QStash, its DLQ and its logs. Reconcile asks it about the events a
// consumer never applied, so the report can say whether the transport is
// still retrying them, gave up on them, or delivered them to a consumer
// that acknowledged without applying. contrib/outboxctl implements it over
// QStash's HTTP API; any transport may.
type TransportLog interface {
	// Lookup returns what the transport knows of each of ids; IDs it
	// knows nothing of are left out of the map. It is called once per
	// page of missing events, with at most ReconcileConfig.PageSize IDs.
	Lookup(ctx context.Context, ids []core.ID) (map[core.ID]TransportState, error)
}

// TransportState is a transport's view of one event.
type TransportState struct {
	// State is the transport's own word for where the message is; for
	// QStash one of CREATED, ACTIVE, RETRY, ERROR, DELIVERED, FAILED,
	// CANCEL_REQUESTED, CANCELLED.
	State string `json:"state"`
	// DeadLettered is whether the message is in the transport's own
	// dead-letter queue (QStash's DLQ: retries exhausted, or a 489 from a
	// core.Permanent handler error).
	DeadLettered bool `json:"dead_lettered"`
	// MessageID and DLQID are the transport's identifiers, when it has
	// them.
	MessageID string `json:"message_id,omitempty"`
	DLQID     string `json:"dlq_id,omitempty"`
	// ResponseStatus is the consumer endpoint's last HTTP status, 0 when
	// unknown or when no response came.
	ResponseStatus int `json:"response_status,omitempty"`
	// Error is the last delivery error or response body the transport
	// kept.
	Error string `json:"error,omitempty"`
	// At is when the message entered State; NextDelivery when the next
	// attempt is due (a retry).
	At           time.Time `json:"at,omitzero"`
	NextDelivery time.Time `json:"next_delivery,omitzero"`
}

// ReconcileEvent is an outbox event a ReconcileReport lists: one the
// consumer has not applied, or a dead letter.
type ReconcileEvent struct {
	ID            core.ID   `json:"id"`
	Type          string    `json:"type"`
	AggregateType string    `json:"aggregate_type,omitempty"`
	AggregateID   string    `json:"aggregate_id,omitempty"`
	CreatedAt     time.Time `json:"created_at,omitzero"`
	// PublishedAt is when the transport accepted the event; zero for a
	// dead letter.
	PublishedAt time.Time `json:"published_at,omitzero"`
	// DeadAt is when it was dead-lettered; zero unless it was.
	DeadAt   time.Time `json:"dead_at,omitzero"`
	Attempts int       `json:"attempts"`
	// LastError is the outbox's last publish error (kept after a replay).
	LastError string `json:"last_error,omitempty"`
	// Applied is whether the consumer has a record of it: always false
	// for a missing event, and true for a dead letter the consumer
	// applied all the same (a publish that timed out after the transport
	// had delivered it, for one).
	Applied bool `json:"applied"`
	// Transport is what ReconcileConfig.Transport knows of it; nil
	// without a transport, or when it knows nothing.
	Transport *TransportState `json:"transport,omitempty"`
}

// PhantomRecord is a processed record whose event the outbox does not
// hold: applied but never published by this outbox (written by hand,
// delivered from elsewhere, or, when ProcessedAt is older than the
// outbox's retention, a pruned event's).
type PhantomRecord struct {
	EventID     core.ID   `json:"event_id"`
	ProcessedAt time.Time `json:"processed_at"`
	// MaybePruned is set when the record is older than the oldest
	// published event the outbox still keeps: its event may have been
	// published and then pruned by retention.
	MaybePruned bool `json:"maybe_pruned"`
}

// ReconcileReport is what Reconcile found. Its counts are complete; its
// lists hold at most ReconcileConfig.MaxListed items each, the oldest
// first.
type ReconcileReport struct {
	Consumer string `json:"consumer"`
	// Since and Until are the window checked (Until as resolved: the
	// start of the check when the config left it zero).
	Since time.Time     `json:"since,omitzero"`
	Until time.Time     `json:"until"`
	Grace time.Duration `json:"-"`
	// CheckedAt is when the check started, by the outbox database's
	// clock: events published after CheckedAt - Grace are in flight.
	CheckedAt time.Time `json:"checked_at"`

	// Published counts the events written in the window that the outbox
	// has published; of those, Applied have a record of the consumer's,
	// Missing have none although published more than Grace ago, and
	// InFlight have none yet and were published within Grace.
	Published int64 `json:"published"`
	Applied   int64 `json:"applied"`
	Missing   int64 `json:"missing"`
	InFlight  int64 `json:"in_flight"`
	// Pending counts events written in the window not yet published
	// (relays' business: outboxctl status and the oldest-pending alert).
	Pending int64 `json:"pending"`
	// DeadLettered counts the window's dead letters in the outbox: never
	// handed to the consumer (DeadAppliedAnyway of them were applied
	// all the same).
	DeadLettered      int64 `json:"dead_lettered"`
	DeadAppliedAnyway int64 `json:"dead_applied_anyway"`
	// Records counts the consumer's records processed in the window;
	// Phantoms of them have no event in the outbox.
	Records  int64 `json:"records"`
	Phantoms int64 `json:"phantoms"`

	MissingEvents  []ReconcileEvent `json:"missing_events"`
	DeadLetters    []ReconcileEvent `json:"dead_letters"`
	PhantomRecords []PhantomRecord  `json:"phantom_records"`

	// OutboxHorizon is the publish time of the oldest published event
	// the outbox keeps (zero when it keeps none): before it, retention
	// (or DeletePublished) has removed events, so a window starting
	// earlier cannot be checked in full.
	OutboxHorizon time.Time `json:"outbox_horizon,omitzero"`
	// Warnings say what limits the report (phantoms that may be records
	// of pruned events, a consumer without any record).
	Warnings []string `json:"warnings"`
	// TransportError is why the transport lookup failed, if it did; the
	// missing events then carry no Transport state from that point on.
	TransportError string `json:"transport_error,omitempty"`
}

// OK reports whether the consumer applied every event published more than
// Grace ago and holds no phantom record: what `outboxctl reconcile` exits
// 0 on.
func (r *ReconcileReport) OK() bool { return r.Missing == 0 && r.Phantoms == 0 }

// Reconcile checks one consumer against the outbox over a window: every
// event the outbox published must have the consumer's processed record,
// and every record the consumer wrote must belong to an event of the
// outbox. outbox is the outbox's database, consumer the consumer's (the
// same handle when they share one); each is a *pgxpool.Pool or a *sql.DB.
//
// It reads both sides in keyset pages of PageSize rows and never holds
// more than a page (plus the listed items), so it runs in bounded memory
// on any number of events. It only reads. It needs the outbox's published
// and dead-letter indexes and the consumer's processed_at index (all
// created by Migrate); published events must still be in the outbox
// (not pruned, not DeletePublished) to be checked.
//
// Sequenced events (with a sequence, consumed through a Sequencer, which
// writes no processed record for them) count as applied when the
// consumer's <table>_sequences holds their aggregate at their sequence or
// beyond.
func Reconcile[O, C Handle](ctx context.Context, outbox O, consumer C, cfg *ReconcileConfig) (*ReconcileReport, error) {
	out, _, err := openHandle(outbox, "outbox")
	if err != nil {
		return nil, err
	}
	con, _, err := openHandle(consumer, "consumer")
	if err != nil {
		return nil, err
	}
	var c ReconcileConfig
	if cfg != nil {
		c = *cfg
	}
	c = c.WithDefaults()
	on, cn, err := c.validate()
	if err != nil {
		return nil, err
	}
	r := &reconciler{out: out, con: con, cfg: c, on: on, cn: cn}
	return r.run(ctx)
}

type reconciler struct {
	out, con conns
	cfg      ReconcileConfig
	on, cn   names
	// sequenced: the consumer side has the Sequencer's table.
	sequenced bool
	rep       *ReconcileReport
	// since and until as parameters ('-infinity' for an open start).
	since, until pgtype.Timestamptz
	// inFlightAfter: published after it, an unapplied event is in flight.
	inFlightAfter time.Time
	transportDone bool
	// maybePruned counts phantoms older than the outbox's horizon.
	maybePruned int64
}

func (r *reconciler) run(ctx context.Context) (*ReconcileReport, error) {
	if err := r.prepare(ctx); err != nil {
		return nil, err
	}
	if err := r.published(ctx); err != nil {
		return nil, err
	}
	if err := r.deadLetters(ctx); err != nil {
		return nil, err
	}
	if err := r.pending(ctx); err != nil {
		return nil, err
	}
	if err := r.phantoms(ctx); err != nil {
		return nil, err
	}
	r.warn()
	return r.rep, nil
}

// prepare checks both sides' tables and reads the outbox's clock and
// horizon.
func (r *reconciler) prepare(ctx context.Context) error {
	var (
		outboxOK bool
		now      time.Time
		horizon  pgtype.Timestamptz
	)
	err := r.out.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL, now()`, r.on.outbox).Scan(&outboxOK, &now)
	if err != nil {
		return wrap("reconcile: read the outbox database's clock", err)
	}
	if !outboxOK {
		return &SchemaError{Schema: r.on.schema, Table: r.on.table, Want: mustLatest()}
	}
	if err := r.out.QueryRow(ctx, `SELECT min(published_at) FROM `+r.on.outbox+` WHERE published_at IS NOT NULL`).Scan(&horizon); err != nil {
		return wrap("reconcile: read the outbox's oldest published event", err)
	}
	var processedOK bool
	if err := r.con.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL`, r.cn.processed, r.cn.sequences).
		Scan(&processedOK, &r.sequenced); err != nil {
		return wrap("reconcile: look up the consumer's tables", err)
	}
	if !processedOK {
		return fmt.Errorf("outboxkit/postgres: reconcile: the consumer's database has no table %s: %w (set ConsumerSchema and ConsumerTable to the consumer's Deduper's Schema and Table, or run postgres.Migrate for them there)",
			r.cn.processed, ErrNotMigrated)
	}
	until := r.cfg.Until
	if until.IsZero() {
		until = now
	}
	r.rep = &ReconcileReport{
		Consumer: r.cfg.Consumer, Since: r.cfg.Since, Until: until, Grace: r.cfg.Grace, CheckedAt: now,
		OutboxHorizon: finiteTime(horizon),
		MissingEvents: []ReconcileEvent{}, DeadLetters: []ReconcileEvent{}, PhantomRecords: []PhantomRecord{}, Warnings: []string{},
	}
	r.since = pgtype.Timestamptz{Time: r.cfg.Since, Valid: true}
	if r.cfg.Since.IsZero() {
		r.since = pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	}
	r.until = pgtype.Timestamptz{Time: until, Valid: true}
	r.inFlightAfter = now.Add(-r.cfg.Grace)
	return nil
}

// mustLatest is the newest embedded migration, for a SchemaError's Want.
func mustLatest() int {
	v, _ := latestMigration()
	return v
}

// listed reports whether a list of n items may take one more.
func (r *reconciler) listed(n int) bool { return r.cfg.MaxListed < 0 || n < r.cfg.MaxListed }

// outboxRow is one event as the published and dead-letter pages read it.
type outboxRow struct {
	id                         pgtype.UUID
	typ, aggType, aggID        string
	seq                        pgtype.Int8
	created, published, deadAt pgtype.Timestamptz
	attempts                   int32
	lastError                  pgtype.Text
}

func (o *outboxRow) dests() []any {
	return []any{&o.id, &o.typ, &o.aggType, &o.aggID, &o.seq, &o.created, &o.published, &o.deadAt, &o.attempts, &o.lastError}
}

func (o *outboxRow) event(applied bool) ReconcileEvent {
	return ReconcileEvent{
		ID: o.id.Bytes, Type: o.typ, AggregateType: o.aggType, AggregateID: o.aggID,
		CreatedAt: finiteTime(o.created), PublishedAt: finiteTime(o.published), DeadAt: finiteTime(o.deadAt),
		Attempts: int(o.attempts), LastError: o.lastError.String, Applied: applied,
	}
}

const reconcileColumns = `id, event_type, aggregate_type, aggregate_id, sequence, created_at, published_at, dead_at, attempts, last_error`

// readOutboxPage runs one page's statement into page (reused).
func readOutboxPage(ctx context.Context, db conns, page []outboxRow, sql string, args ...any) ([]outboxRow, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	page = page[:0]
	for rows.Next() {
		page = append(page, outboxRow{})
		if err := rows.Scan(page[len(page)-1].dests()...); err != nil {
			return nil, err
		}
	}
	return page, rows.Err()
}

// published walks the window's published events and looks each page up
// on the consumer's side.
func (r *reconciler) published(ctx context.Context) error {
	// The published index holds published_at only: the row comparison
	// continues a page after the last one, and the explicit bound on
	// published_at lets the index scan start there.
	sql := `SELECT ` + reconcileColumns + ` FROM ` + r.on.outbox + `
WHERE published_at IS NOT NULL
	AND published_at >= $1::timestamptz AND published_at >= $2::timestamptz
	AND (published_at, id) > ($2::timestamptz, $3::uuid)
	AND created_at >= $1::timestamptz AND created_at < $4::timestamptz
ORDER BY published_at, id
LIMIT $5`
	afterAt := r.since
	afterID := pgtype.UUID{Valid: true}
	var page []outboxRow
	for {
		var err error
		page, err = readOutboxPage(ctx, r.out, page, sql, r.since, afterAt, afterID, r.until, r.cfg.PageSize)
		if err != nil {
			return wrap("reconcile: read published events", err)
		}
		if len(page) == 0 {
			return nil
		}
		applied, err := r.applied(ctx, page)
		if err != nil {
			return err
		}
		var missing []ReconcileEvent
		for i := range page {
			o := &page[i]
			r.rep.Published++
			switch {
			case applied[i]:
				r.rep.Applied++
			case o.published.InfinityModifier == pgtype.Finite && o.published.Time.After(r.inFlightAfter):
				r.rep.InFlight++
			default:
				r.rep.Missing++
				missing = append(missing, o.event(false))
			}
		}
		if len(missing) > 0 {
			if err := r.missing(ctx, missing); err != nil {
				return err
			}
		}
		last := page[len(page)-1]
		afterAt, afterID = last.published, last.id
		if len(page) < r.cfg.PageSize {
			return nil
		}
	}
}

// missing asks the transport about a page's missing events, lists them and
// hands them to OnMissing.
func (r *reconciler) missing(ctx context.Context, missing []ReconcileEvent) error {
	if r.cfg.Transport != nil && !r.transportDone {
		ids := make([]core.ID, len(missing))
		for i := range missing {
			ids[i] = missing[i].ID
		}
		states, err := r.cfg.Transport.Lookup(ctx, ids)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r.rep.TransportError = err.Error()
			r.transportDone = true
		}
		for i := range missing {
			if st, ok := states[missing[i].ID]; ok {
				st := st
				missing[i].Transport = &st
			}
		}
	}
	for _, e := range missing {
		if !r.listed(len(r.rep.MissingEvents)) {
			break
		}
		r.rep.MissingEvents = append(r.rep.MissingEvents, e)
	}
	if r.cfg.OnMissing != nil {
		if err := r.cfg.OnMissing(ctx, missing); err != nil {
			return fmt.Errorf("outboxkit/postgres: reconcile: OnMissing: %w", err)
		}
	}
	return nil
}

// applied reports, for each event of page, whether the consumer recorded
// it: a processed record, or, for a sequenced event, its Sequencer's
// position at or beyond its sequence.
func (r *reconciler) applied(ctx context.Context, page []outboxRow) ([]bool, error) {
	ids := make([]pgtype.UUID, len(page))
	for i := range page {
		ids[i] = page[i].id
	}
	rows, err := r.con.Query(ctx, `SELECT event_id FROM `+r.cn.processed+` WHERE consumer = $1 AND event_id = ANY($2::uuid[])`,
		r.cfg.Consumer, ids)
	if err != nil {
		return nil, wrap("reconcile: look up the consumer's processed records", err)
	}
	found := make(map[core.ID]struct{}, len(page))
	for rows.Next() {
		var id pgtype.UUID
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, wrap("reconcile: look up the consumer's processed records", err)
		}
		found[id.Bytes] = struct{}{}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, wrap("reconcile: look up the consumer's processed records", err)
	}
	out := make([]bool, len(page))
	var (
		seqIdx        []int
		aggT, aggI    []string
		seqs          []int64
		anyUnrecorded bool
	)
	for i := range page {
		_, out[i] = found[page[i].id.Bytes]
		if !out[i] {
			anyUnrecorded = true
			if r.sequenced && page[i].seq.Valid && page[i].aggID != "" {
				seqIdx = append(seqIdx, i)
				aggT, aggI, seqs = append(aggT, page[i].aggType), append(aggI, page[i].aggID), append(seqs, page[i].seq.Int64)
			}
		}
	}
	if !anyUnrecorded || len(seqIdx) == 0 {
		return out, nil
	}
	rows, err = r.con.Query(ctx, `SELECT u.i FROM unnest($2::text[], $3::text[], $4::int8[]) WITH ORDINALITY AS u(agg_type, agg_id, seq, i)
WHERE EXISTS (SELECT 1 FROM `+r.cn.sequences+` s
	WHERE s.consumer = $1 AND s.aggregate_type = u.agg_type AND s.aggregate_id = u.agg_id AND s.last_sequence >= u.seq)`,
		r.cfg.Consumer, aggT, aggI, seqs)
	if err != nil {
		return nil, wrap("reconcile: look up the consumer's sequences", err)
	}
	defer rows.Close()
	for rows.Next() {
		var ord int64
		if err := rows.Scan(&ord); err != nil {
			return nil, wrap("reconcile: look up the consumer's sequences", err)
		}
		if ord >= 1 && int(ord) <= len(seqIdx) {
			out[seqIdx[ord-1]] = true
		}
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("reconcile: look up the consumer's sequences", err)
	}
	return out, nil
}

// deadLetters walks the window's dead letters through the dead-letter
// index, in ID order.
func (r *reconciler) deadLetters(ctx context.Context) error {
	sql := `SELECT ` + reconcileColumns + ` FROM ` + r.on.outbox + `
WHERE dead_at IS NOT NULL AND id > $1::uuid
	AND created_at >= $2::timestamptz AND created_at < $3::timestamptz
ORDER BY id
LIMIT $4`
	after := pgtype.UUID{Valid: true}
	var page []outboxRow
	for {
		var err error
		page, err = readOutboxPage(ctx, r.out, page, sql, after, r.since, r.until, r.cfg.PageSize)
		if err != nil {
			return wrap("reconcile: read dead letters", err)
		}
		if len(page) == 0 {
			return nil
		}
		applied, err := r.applied(ctx, page)
		if err != nil {
			return err
		}
		for i := range page {
			r.rep.DeadLettered++
			if applied[i] {
				r.rep.DeadAppliedAnyway++
			}
			if r.listed(len(r.rep.DeadLetters)) {
				r.rep.DeadLetters = append(r.rep.DeadLetters, page[i].event(applied[i]))
			}
		}
		after = page[len(page)-1].id
		if len(page) < r.cfg.PageSize {
			return nil
		}
	}
}

// pending counts the window's events not yet published, through the
// pending index.
func (r *reconciler) pending(ctx context.Context) error {
	err := r.out.QueryRow(ctx, `SELECT count(*) FROM `+r.on.outbox+`
WHERE published_at IS NULL AND dead_at IS NULL AND created_at >= $1::timestamptz AND created_at < $2::timestamptz`,
		r.since, r.until).Scan(&r.rep.Pending)
	return wrap("reconcile: count pending events", err)
}

// phantoms walks the consumer's records processed in the window and looks
// each page's events up in the outbox.
func (r *reconciler) phantoms(ctx context.Context) error {
	sql := `SELECT event_id, processed_at FROM ` + r.cn.processed + `
WHERE consumer = $1
	AND processed_at >= $2::timestamptz AND processed_at < $3::timestamptz AND processed_at >= $4::timestamptz
	AND (processed_at, event_id) > ($4::timestamptz, $5::uuid)
ORDER BY processed_at, event_id
LIMIT $6`
	afterAt, afterID := r.since, pgtype.UUID{Valid: true}
	type rec struct {
		id pgtype.UUID
		at pgtype.Timestamptz
	}
	page := make([]rec, 0, r.cfg.PageSize)
	ids := make([]pgtype.UUID, 0, r.cfg.PageSize)
	for {
		rows, err := r.con.Query(ctx, sql, r.cfg.Consumer, r.since, r.until, afterAt, afterID, r.cfg.PageSize)
		if err != nil {
			return wrap("reconcile: read the consumer's records", err)
		}
		page = page[:0]
		for rows.Next() {
			page = append(page, rec{})
			if err := rows.Scan(&page[len(page)-1].id, &page[len(page)-1].at); err != nil {
				rows.Close()
				return wrap("reconcile: read the consumer's records", err)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return wrap("reconcile: read the consumer's records", err)
		}
		if len(page) == 0 {
			return nil
		}
		ids = ids[:0]
		for _, p := range page {
			ids = append(ids, p.id)
		}
		rows, err = r.out.Query(ctx, `SELECT id FROM `+r.on.outbox+` WHERE id = ANY($1::uuid[])`, ids)
		if err != nil {
			return wrap("reconcile: look up the records' events", err)
		}
		known := make(map[core.ID]struct{}, len(page))
		for rows.Next() {
			var id pgtype.UUID
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return wrap("reconcile: look up the records' events", err)
			}
			known[id.Bytes] = struct{}{}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return wrap("reconcile: look up the records' events", err)
		}
		for _, p := range page {
			r.rep.Records++
			if _, ok := known[p.id.Bytes]; ok {
				continue
			}
			r.rep.Phantoms++
			at := finiteTime(p.at)
			pruned := r.rep.OutboxHorizon.IsZero() || at.Before(r.rep.OutboxHorizon)
			if pruned {
				r.maybePruned++
			}
			if r.listed(len(r.rep.PhantomRecords)) {
				r.rep.PhantomRecords = append(r.rep.PhantomRecords, PhantomRecord{EventID: p.id.Bytes, ProcessedAt: at, MaybePruned: pruned})
			}
		}
		last := page[len(page)-1]
		afterAt, afterID = last.at, last.id
		if len(page) < r.cfg.PageSize {
			return nil
		}
	}
}

// warn notes what limits the report.
func (r *reconciler) warn() {
	rep := r.rep
	if r.maybePruned > 0 {
		if rep.OutboxHorizon.IsZero() {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("the outbox keeps no published event (pruned, or DeletePublished), so the consumer's %d phantom record(s) may be records of pruned events: reconcile needs the window's published events kept", r.maybePruned))
		} else {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("%d phantom record(s) were processed before the oldest published event the outbox still keeps (%s): they may be records of events retention pruned; start the window after that time to check only what the outbox holds",
				r.maybePruned, rep.OutboxHorizon.UTC().Format(time.RFC3339)))
		}
	}
	if rep.Published > 0 && rep.Applied == 0 && rep.Records == 0 {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("consumer %q has no record at all in the window: check the consumer name and ConsumerSchema/ConsumerTable (--consumer-schema, --consumer-table)", rep.Consumer))
	}
}
