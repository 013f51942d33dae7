package postgres

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outboxkit/core"
)

// Accept writes delivered events into the store's table as they were
// delivered, skipping every event whose ID the table already holds, and
// reports how many it wrote. It is the write path of an inbox (see Inbox): a
// consumer stores a verified delivery and answers its transport at once,
// and inbox workers apply the handler later. A redelivery of an event
// already accepted writes nothing and is not an error, so Accept is
// idempotent.
//
// Each event keeps what its producer gave it: ID, type, schema version,
// source, aggregate, payload, headers (trace context included) and
// CreatedAt. Its Sequence is kept too, never renumbered: with
// Config.Ordering on, the inbox's claims hand out an aggregate's events in
// the producer's sequence order among the events that have arrived (an
// event whose predecessor has not arrived yet is not held back; see Inbox
// for what closes that gap). A zero Sequence leaves the event unordered.
// AvailableAt and Attempts are the inbox's own: every accepted event is due
// at once, the database's now(), with no attempts.
//
// Accept validates every event as Add does (core.Event.Validate, the
// payload size limit, what jsonb cannot store) and writes nothing if any is
// invalid, returning a *core.ValidationError; an event given twice in one
// call is written once. Config.BeforeAdd is not called: the trace context
// to keep is the producer's, which the event already carries.
//
// db is the pool, for a write of its own (one statement, one round trip,
// committed when Accept returns), or the caller's transaction, to accept
// atomically with other writes. With NotifyInTransaction the statement
// sends the wake-up; with NotifyAfterCommit call Notify once the write
// committed (Inbox.Handle does).
func (s *Store) Accept(ctx context.Context, db DBTX, events ...core.Event) (accepted int, err error) {
	notify := s.cfg.Notify == NotifyInTransaction
	return s.accept(ctx, db, acceptOneSQL(s.n, notify), acceptSQL(s.n, notify), events)
}

// accept is Accept with its statements given, so an Inbox builds them once.
func (s *Store) accept(ctx context.Context, db DBTX, oneSQL, manySQL string, events []core.Event) (int, error) {
	if len(events) == 0 {
		return 0, nil
	}
	if db == nil {
		return 0, &core.ConfigError{Field: "db", Reason: "is nil: pass the pool, or the transaction to accept the events in"}
	}
	events = uniqueEvents(events)
	if err := s.validateEvents(events); err != nil {
		return 0, err
	}
	var (
		sql  string
		args []any
	)
	if len(events) == 1 {
		e := &events[0]
		h, err := headersJSON(e)
		if err != nil {
			return 0, err
		}
		sql = oneSQL
		args = []any{
			pgtype.UUID{Bytes: e.ID, Valid: true}, e.Type, int32(max(e.SchemaVersion, 1)), e.Source,
			e.AggregateType, e.AggregateID, pgtype.Int8{Int64: e.Sequence, Valid: e.Sequence != 0},
			e.Payload, h, e.Destination, optionalTime(e.CreatedAt),
		}
	} else {
		n := len(events)
		var (
			ids       = make([]pgtype.UUID, n)
			types     = make([]string, n)
			versions  = make([]int32, n)
			sources   = make([]string, n)
			aggTypes  = make([]string, n)
			aggIDs    = make([]string, n)
			seqs      = make([]pgtype.Int8, n)
			payloads  = make([]json.RawMessage, n)
			headers   = make([]json.RawMessage, n)
			dests     = make([]string, n)
			createdAt = make([]pgtype.Timestamptz, n)
		)
		for i := range events {
			e := &events[i]
			h, err := headersJSON(e)
			if err != nil {
				return 0, err
			}
			ids[i] = pgtype.UUID{Bytes: e.ID, Valid: true}
			types[i] = e.Type
			versions[i] = int32(max(e.SchemaVersion, 1))
			sources[i] = e.Source
			aggTypes[i] = e.AggregateType
			aggIDs[i] = e.AggregateID
			seqs[i] = pgtype.Int8{Int64: e.Sequence, Valid: e.Sequence != 0}
			payloads[i] = e.Payload
			headers[i] = h
			dests[i] = e.Destination
			createdAt[i] = optionalTime(e.CreatedAt)
		}
		sql = manySQL
		args = []any{ids, types, versions, sources, aggTypes, aggIDs, seqs, payloads, headers, dests, createdAt}
	}
	if s.cfg.Notify == NotifyInTransaction {
		args = append(args, s.cfg.Channel)
	}
	tag, err := db.Exec(ctx, sql, args...)
	if err != nil {
		return 0, wrap("accept events", err)
	}
	return int(tag.RowsAffected()), nil
}

// uniqueEvents drops the later copies of an ID given twice: a transport
// that batches deliveries may repeat one, and both copies are the same
// event.
func uniqueEvents(events []core.Event) []core.Event {
	if len(events) < 2 {
		return events
	}
	seen := make(map[core.ID]struct{}, len(events))
	for i := range events {
		if _, dup := seen[events[i].ID]; dup {
			// Copy only when there is something to drop: the
			// caller's slice is left as it was.
			out := append([]core.Event(nil), events[:i]...)
			for _, e := range events[i+1:] {
				if _, dup := seen[e.ID]; !dup {
					seen[e.ID] = struct{}{}
					out = append(out, e)
				}
			}
			return out
		}
		seen[events[i].ID] = struct{}{}
	}
	return events
}

func headersJSON(e *core.Event) (json.RawMessage, error) {
	if len(e.Headers) == 0 {
		return json.RawMessage(emptyObjectJSON), nil
	}
	h, err := json.Marshal(e.Headers)
	if err != nil { // cannot happen for map[string]string
		return nil, fmt.Errorf("outboxkit/postgres: encode headers of event %s: %w", e.ID, err)
	}
	return h, nil
}
