package postgres

import (
	"context"

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
		sql  = manySQL
		args []any
		err  error
	)
	if len(events) == 1 {
		sql = oneSQL
		args, err = eventArgs(&events[0], false)
	} else {
		args, _, err = eventColumnArgs(events, false)
	}
	if err != nil {
		return 0, err
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
