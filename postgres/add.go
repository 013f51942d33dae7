package postgres

import (
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outboxkit/core"
)

// Add writes events to the outbox through tx, normally the caller's own
// transaction, so they commit or roll back with the business change. It
// validates every event first (core.Event.Validate, the payload size limit,
// and what jsonb cannot store) and writes nothing if any is invalid,
// returning a *core.ValidationError.
//
// Add costs one round trip whatever the number of events: one statement
// (INSERT ... VALUES for a single event, INSERT ... SELECT FROM unnest(...)
// for several), which with ordering on also bumps the aggregates' sequence
// counters. By default (NotifyNone) it sends no wake-up: relays learn of
// the commit from the WAL, or by polling. With NotifyInTransaction it also
// sends a NOTIFY, whose constant payload PostgreSQL delivers once per
// transaction however many Add calls the transaction makes; that matters
// because NOTIFY takes a cluster-wide lock at commit. With
// NotifyAfterCommit, Add sends nothing: call Notify once the transaction
// has committed, or write through InTx, which does.
//
// Config.BeforeAdd, when set, sees each event (a copy) before validation:
// that is where tracing.NewInjector records the caller's trace context.
//
// A zero CreatedAt becomes the database's now() (the transaction's start)
// and a zero AvailableAt becomes CreatedAt; a zero SchemaVersion becomes 1. With ordering on,
// Sequence is assigned for events with an AggregateID (any value given is
// replaced). An event whose ID is already stored fails with an error
// matching ErrDuplicateEvent, and like any statement error it aborts tx.
func (s *Store) Add(ctx context.Context, tx DBTX, events ...core.Event) error {
	if len(events) == 0 {
		return nil
	}
	if tx == nil {
		return &core.ConfigError{Field: "tx", Reason: "is nil: pass the transaction that writes your business rows"}
	}
	if s.cfg.BeforeAdd != nil {
		// The hook edits copies: the caller's slice is left as it was.
		events = slices.Clone(events)
		for i := range events {
			s.cfg.BeforeAdd(ctx, &events[i])
		}
	}
	if err := s.validateEvents(events); err != nil {
		return err
	}
	if len(events) == 1 {
		return s.addOne(ctx, tx, &events[0])
	}

	args, aggregated, err := eventColumnArgs(events, true)
	if err != nil {
		return err
	}
	sql := s.addSQL
	if s.cfg.Ordering && aggregated {
		sql = s.addOrderedSQL
	}
	if s.cfg.Notify == NotifyInTransaction {
		args = append(args, s.cfg.Channel)
	}
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		return wrap("add events", err)
	}
	return nil
}

// addOne writes a single validated event with the single-row statements.
func (s *Store) addOne(ctx context.Context, tx DBTX, e *core.Event) error {
	args, err := eventArgs(e, true)
	if err != nil {
		return err
	}
	sql := s.addOneSQL
	if s.cfg.Ordering && e.AggregateID != "" {
		sql = s.addOneOrderedSQL
	}
	if s.cfg.Notify == NotifyInTransaction {
		args = append(args, s.cfg.Channel)
	}
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		return wrap("add event", err)
	}
	return nil
}

// emptyObjectJSON is what headers hold when an event has none.
const emptyObjectJSON = "{}"

func optionalTime(t time.Time) pgtype.Timestamptz {
	return pgtype.Timestamptz{Time: t, Valid: !t.IsZero()}
}

// validateEvents checks every event before anything is sent, so an invalid
// batch writes nothing and does not abort the caller's transaction.
func (s *Store) validateEvents(events []core.Event) error {
	var seen map[core.ID]struct{}
	if len(events) > 1 {
		seen = make(map[core.ID]struct{}, len(events))
	}
	for i := range events {
		e := &events[i]
		if err := e.Validate(); err != nil {
			return err
		}
		if err := e.ValidatePayloadSize(s.cfg.MaxPayloadBytes); err != nil {
			return err
		}
		if reason := jsonbProblem(e.Payload); reason != "" {
			return &core.ValidationError{EventID: e.ID, Field: "Payload", Reason: reason}
		}
		if seen != nil {
			if _, dup := seen[e.ID]; dup {
				return &core.ValidationError{EventID: e.ID, Field: "ID", Reason: "appears twice in one Add call: every event needs its own ID"}
			}
			seen[e.ID] = struct{}{}
		}
	}
	return nil
}

// jsonbProblem reports why valid JSON text cannot be stored as jsonb, or ""
// if it can. jsonb refuses two things JSON allows: the escape \u0000 and a
// \u escape of a lone UTF-16 surrogate. Refusing them here keeps a bad event
// from aborting the caller's transaction. Only escapes are inspected, so the
// scan is cheap: it looks at the bytes after each backslash.
func jsonbProblem(b []byte) string {
	const lone = `contains a \u escape of a lone UTF-16 surrogate, which PostgreSQL's jsonb cannot store`
	high := false // the previous token was a high-surrogate escape
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			if high {
				return lone
			}
			continue
		}
		if i+1 < len(b) && b[i+1] != 'u' || i+6 > len(b) {
			if high {
				return lone
			}
			i++ // skip the escaped character, which may be a backslash
			continue
		}
		v, ok := hex4(b[i+2 : i+6])
		if !ok { // cannot happen in valid JSON
			return ""
		}
		switch {
		case v == 0:
			return `contains the escape \u0000, which PostgreSQL's jsonb cannot store: drop or replace the NUL character`
		case v >= 0xD800 && v <= 0xDBFF:
			if high {
				return lone
			}
			high = true
		case v >= 0xDC00 && v <= 0xDFFF:
			if !high {
				return lone
			}
			high = false
		default:
			if high {
				return lone
			}
		}
		i += 5
	}
	if high {
		return lone
	}
	return ""
}

func hex4(b []byte) (uint16, bool) {
	var v uint16
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		v = v<<4 | uint16(c)
	}
	return v, true
}
