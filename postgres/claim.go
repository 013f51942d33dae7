package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outboxkit/core"
)

// maxErrorBytes bounds the publish error text kept in last_error: a
// transport may return a whole HTTP body, and every retry rewrites the row.
const maxErrorBytes = 4096

// Claim leases up to req.Limit due events under a fresh lease token in one
// statement (docs/SCHEMA.md shows it). Due means: neither published nor
// dead-lettered, AvailableAt reached, and no live lease; with ordering on,
// also the head of its aggregate; with req.Destination set, also bound for
// that destination. The events come back in the order they were selected:
// AvailableAt, then insertion order.
//
// "Now" is the database's now() unless req.Now is set, so relays on hosts
// with skewed clocks agree on lease expiry.
func (s *Store) Claim(ctx context.Context, req core.ClaimRequest) (core.Batch, error) {
	if req.Limit < 1 {
		return core.Batch{}, fmt.Errorf("outboxkit/postgres: claim: Limit is %d; it must be at least 1", req.Limit)
	}
	if req.LeaseFor <= 0 {
		return core.Batch{}, fmt.Errorf("outboxkit/postgres: claim: LeaseFor is %v; it must be positive", req.LeaseFor)
	}
	token := core.NewID()
	sql := s.claimSQL
	args := []any{optionalTime(req.Now), req.Limit, pgtype.UUID{Bytes: token, Valid: true}, req.LeaseFor}
	if req.Destination != "" {
		sql = s.claimDestSQL
		args = append(args, req.Destination)
	}
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return core.Batch{}, wrap("claim", err)
	}
	type claimed struct {
		pos int64
		ev  core.Event
	}
	out := make([]claimed, 0, req.Limit)
	var until time.Time
	var sc eventScanner
	for rows.Next() {
		var c claimed
		if err := rows.Scan(append(sc.dests(&c.ev), &until, &c.pos)...); err != nil {
			rows.Close()
			return core.Batch{}, wrap("claim: read event", err)
		}
		sc.finish(&c.ev)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return core.Batch{}, wrap("claim", err)
	}
	// RETURNING order is unspecified; restore the claim order. Sorting here
	// rather than in SQL keeps the work off the database.
	slices.SortFunc(out, func(a, b claimed) int {
		if c := a.ev.AvailableAt.Compare(b.ev.AvailableAt); c != 0 {
			return c
		}
		return cmpInt64(a.pos, b.pos)
	})
	events := make([]core.Event, len(out))
	for i := range out {
		events[i] = out[i].ev
	}
	return core.Batch{Lease: core.Lease{Token: token, Until: until}, Events: events}, nil
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Settle records the outcome of each event of one lease in one statement,
// touching only rows whose lease token is still req.Lease.Token:
//
//   - Published: published_at = now, lease cleared (or, with
//     Config.DeletePublished, the row deleted).
//   - Retry: available_at = now + Delay, last_error = Error, lease cleared.
//   - DeadLettered: dead_at = now, last_error = Error, lease cleared.
//   - Released: lease cleared and Attempts given back; the event is due at
//     once (its available_at had already passed when it was claimed).
//
// Events whose token no longer matches (the lease expired and another relay
// claimed them, or an operator replayed them) are left alone and reported in
// a *core.LeaseLostError after the rest are settled. An expired lease that
// nobody took over still settles: refusing it would only cause a duplicate
// publish.
//
// Error texts are cut to 4 KiB and made valid UTF-8 without NUL, which text
// columns cannot hold.
func (s *Store) Settle(ctx context.Context, req core.SettleRequest) error {
	if len(req.Outcomes) == 0 {
		return nil
	}
	if req.Lease.Token.IsZero() {
		return fmt.Errorf("outboxkit/postgres: settle: the lease token is zero: pass the Lease from Claim")
	}
	n := len(req.Outcomes)
	ids := make([]pgtype.UUID, n)
	seen := make(map[core.ID]struct{}, n)
	allPublished := true
	for i, o := range req.Outcomes {
		if o.ID.IsZero() {
			return fmt.Errorf("outboxkit/postgres: settle: outcome %d has a zero event ID", i)
		}
		if _, dup := seen[o.ID]; dup {
			return fmt.Errorf("outboxkit/postgres: settle: event %s has two outcomes", o.ID)
		}
		seen[o.ID] = struct{}{}
		ids[i] = pgtype.UUID{Bytes: o.ID, Valid: true}
		if o.Kind != core.Published {
			allPublished = false
		}
	}
	token := pgtype.UUID{Bytes: req.Lease.Token, Valid: true}
	now := optionalTime(req.Now)

	var rows pgx.Rows
	var err error
	switch {
	case allPublished && s.cfg.DeletePublished:
		rows, err = s.pool.Query(ctx, s.deleteSQL, token, ids)
	case allPublished:
		rows, err = s.pool.Query(ctx, s.publishSQL, token, now, ids)
	default:
		var published []pgtype.UUID
		others := ids
		if s.cfg.DeletePublished {
			others = make([]pgtype.UUID, 0, n)
		}
		kinds := make([]int32, 0, n)
		errs := make([]string, 0, n)
		delays := make([]int64, 0, n)
		for i, o := range req.Outcomes {
			var kind int32
			var delay int64
			switch o.Kind {
			case core.Published:
				kind = kindPublished
			case core.Retry:
				kind = kindRetry
				delay = max(o.Delay, 0).Microseconds()
			case core.DeadLettered:
				kind = kindDead
			case core.Released:
				kind = kindReleased
			default:
				return fmt.Errorf("outboxkit/postgres: settle: event %s has unknown outcome kind %d", o.ID, int(o.Kind))
			}
			if s.cfg.DeletePublished {
				if kind == kindPublished {
					published = append(published, ids[i])
					continue
				}
				others = append(others, ids[i])
			}
			kinds = append(kinds, kind)
			errs = append(errs, cleanErrorText(o.Error))
			delays = append(delays, delay)
		}
		if s.cfg.DeletePublished {
			rows, err = s.pool.Query(ctx, s.settleDeleteSQL, token, now, others, kinds, errs, delays, published)
		} else {
			rows, err = s.pool.Query(ctx, s.settleSQL, token, now, ids, kinds, errs, delays)
		}
	}
	if err != nil {
		return wrap("settle", err)
	}
	var id pgtype.UUID
	_, err = pgx.ForEachRow(rows, []any{&id}, func() error {
		delete(seen, core.ID(id.Bytes))
		return nil
	})
	if err != nil {
		return wrap("settle", err)
	}
	if len(seen) == 0 {
		return nil
	}
	lost := make([]core.ID, 0, len(seen))
	for _, o := range req.Outcomes { // keep the caller's order
		if _, ok := seen[o.ID]; ok {
			lost = append(lost, o.ID)
		}
	}
	return &core.LeaseLostError{IDs: lost}
}

// cleanErrorText makes a publish error storable in a text column.
func cleanErrorText(s string) string {
	if len(s) > maxErrorBytes {
		cut := maxErrorBytes
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.ReplaceAll(s, "\x00", "")
}

// eventScanner reads the eventColumns of a row into a core.Event. Its scratch
// fields are reused across rows.
type eventScanner struct {
	id      pgtype.UUID
	version int32
	seq     pgtype.Int8
	headers []byte
	att     int32
}

func (sc *eventScanner) dests(e *core.Event) []any {
	return []any{&sc.id, &e.Type, &sc.version, &e.Source, &e.AggregateType, &e.AggregateID, &sc.seq,
		(*[]byte)(&e.Payload), &sc.headers, &e.Destination, &e.CreatedAt, &e.AvailableAt, &sc.att}
}

func (sc *eventScanner) finish(e *core.Event) {
	e.ID = sc.id.Bytes
	e.SchemaVersion = int(sc.version)
	if sc.seq.Valid {
		e.Sequence = sc.seq.Int64
	}
	e.Attempts = int(sc.att)
	e.Headers = decodeHeaders(sc.headers)
}

// decodeHeaders reads the headers column. It never fails: a row written by
// another service with non-string values keeps them as their JSON text, so
// one odd row cannot stop the relay.
func decodeHeaders(b []byte) map[string]string {
	if len(b) <= 2 { // "{}" (the column is checked to hold an object)
		return nil
	}
	var h map[string]string
	if err := json.Unmarshal(b, &h); err == nil {
		return h
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil
	}
	h = make(map[string]string, len(raw))
	for k, v := range raw {
		var str string
		if json.Unmarshal(v, &str) == nil {
			h[k] = str
		} else {
			h[k] = string(v)
		}
	}
	return h
}
