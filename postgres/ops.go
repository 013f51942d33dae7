package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outboxkit/core"
)

// Stats implements core.StatsReader in one statement. Ages are measured with
// the database clock, so they are right whatever the caller's clock says.
func (s *Store) Stats(ctx context.Context) (core.Stats, error) {
	var (
		st       core.Stats
		oldest   pgtype.Timestamptz
		attempts map[string]int64
		now      time.Time
	)
	err := s.db.QueryRow(ctx, s.statsSQL).Scan(&st.Pending, &oldest, &st.Leased, &st.DeadLettered, &attempts, &now)
	if err != nil {
		return core.Stats{}, wrap("stats", err)
	}
	if oldest.Valid {
		st.OldestPendingAt = oldest.Time
		st.OldestPendingAge = max(now.Sub(oldest.Time), 0)
	}
	st.Attempts = make(map[int]int64, len(attempts))
	for k, v := range attempts {
		n, err := strconv.Atoi(k)
		if err != nil {
			return core.Stats{}, fmt.Errorf("outboxkit/postgres: stats: unexpected attempts key %q", k)
		}
		st.Attempts[n] = v
	}
	return st, nil
}

// Prune implements core.Pruner: it deletes events published before
// req.PublishedBefore, oldest first, in statements of at most req.BatchSize
// rows (default 1000) so it never holds many locks or writes a long burst of
// WAL, calling req.Progress after each. Dead-lettered and pending events are
// never pruned. It stops early, returning what it deleted so far, when ctx is
// done.
func (s *Store) Prune(ctx context.Context, req core.PruneRequest) (int64, error) {
	if req.PublishedBefore.IsZero() {
		return 0, fmt.Errorf("outboxkit/postgres: prune: PublishedBefore is zero: say which published events are old enough to delete")
	}
	batch := req.BatchSize
	if batch <= 0 {
		batch = defaultPruneBatch
	}
	s.knownLayout(ctx)
	sql := s.pruneSQL
	if s.partitioned() {
		sql = s.partStmts().prune
	}
	var total int64
	for {
		tag, err := s.db.Exec(ctx, sql, s.relayArgs([]any{req.PublishedBefore, batch})...)
		if err != nil {
			return total, wrap("prune", err)
		}
		total += tag.RowsAffected()
		if req.Progress != nil && tag.RowsAffected() > 0 {
			req.Progress(total)
		}
		if tag.RowsAffected() < int64(batch) {
			return total, nil
		}
	}
}

// Replay implements core.Replayer: it puts published and dead-lettered
// events matching f back to pending with their IDs, sequences and payloads
// unchanged, so consumers' deduplication still recognises those already
// applied. It resets attempts to 0, clears published_at, dead_at and any
// lease, and makes them due now (database clock). last_error is kept so
// operators can still see why an event failed; the next failure overwrites
// it. Pending events, including those in flight, are not touched. An empty
// filter is refused with ErrEmptyFilter.
//
// With ordering on, a replayed event keeps its old sequence, so it becomes
// its aggregate's head again and holds back that aggregate's newer pending
// events until it is settled.
func (s *Store) Replay(ctx context.Context, f core.ReplayFilter) (int64, error) {
	where, args, err := filterSQL(f)
	if err != nil {
		return 0, err
	}
	sql := `UPDATE ` + s.n.outbox + `
SET published_at = NULL, dead_at = NULL, attempts = 0, lease_token = NULL, lease_until = NULL, available_at = now()
WHERE (published_at IS NOT NULL OR dead_at IS NOT NULL)` + where
	tag, err := s.db.Exec(ctx, sql, args...)
	if err != nil {
		return 0, wrap("replay", err)
	}
	if n := tag.RowsAffected(); n > 0 && s.cfg.Notify != NotifyOff {
		// Best effort: the relay's polling finds the events anyway.
		_, _ = s.db.Exec(ctx, "SELECT pg_notify($1, '')", s.cfg.Channel)
	}
	return tag.RowsAffected(), nil
}

// Purge deletes published and dead-lettered events matching f (an operator's
// "dlq purge" sets DeadOnly) and returns how many it deleted. Pending events
// are never purged. An empty filter is refused with ErrEmptyFilter.
func (s *Store) Purge(ctx context.Context, f core.ReplayFilter) (int64, error) {
	where, args, err := filterSQL(f)
	if err != nil {
		return 0, err
	}
	tag, err := s.db.Exec(ctx, `DELETE FROM `+s.n.outbox+`
WHERE (published_at IS NOT NULL OR dead_at IS NOT NULL)`+where, args...)
	if err != nil {
		return 0, wrap("purge", err)
	}
	return tag.RowsAffected(), nil
}

// filterSQL turns a filter into "AND ..." conditions built from fixed
// fragments; values go into args.
func filterSQL(f core.ReplayFilter) (string, []any, error) {
	if f.Empty() {
		return "", nil, ErrEmptyFilter
	}
	var b strings.Builder
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		b.WriteString("\n\tAND ")
		b.WriteString(strings.ReplaceAll(cond, "$?", "$"+strconv.Itoa(len(args))))
	}
	if len(f.IDs) > 0 {
		ids := make([]pgtype.UUID, len(f.IDs))
		for i, id := range f.IDs {
			ids[i] = pgtype.UUID{Bytes: id, Valid: true}
		}
		add("id = ANY($?::uuid[])", ids)
	}
	if len(f.Types) > 0 {
		add("event_type = ANY($?::text[])", f.Types)
	}
	if f.AggregateType != "" {
		add("aggregate_type = $?", f.AggregateType)
	}
	if f.AggregateID != "" {
		add("aggregate_id = $?", f.AggregateID)
	}
	if !f.Since.IsZero() {
		add("created_at >= $?", f.Since)
	}
	if !f.Until.IsZero() {
		add("created_at < $?", f.Until)
	}
	if f.DeadOnly {
		b.WriteString("\n\tAND dead_at IS NOT NULL")
	}
	return b.String(), args, nil
}

// State is where an event is in its life.
type State string

// Event states, as Record.State reports them.
const (
	StatePending      State = "pending"       // waiting to be claimed (maybe retrying)
	StateLeased       State = "leased"        // claimed under a live lease
	StatePublished    State = "published"     // accepted by the transport
	StateDeadLettered State = "dead-lettered" // failed for good; kept until replayed or purged
)

// Record is an event with the bookkeeping operators need, as Get and
// DeadLetters return it.
type Record struct {
	core.Event
	State       State
	PublishedAt time.Time // zero unless published
	DeadAt      time.Time // zero unless dead-lettered
	LeaseUntil  time.Time // zero unless claimed
	LastError   string    // the latest publish error, if any
}

// Get returns the event with the given ID, whatever its state, or an error
// matching ErrNotFound.
func (s *Store) Get(ctx context.Context, id core.ID) (Record, error) {
	rows, err := s.db.Query(ctx, `SELECT `+recordColumns+`, now() FROM `+s.n.outbox+` WHERE id = $1`,
		pgtype.UUID{Bytes: id, Valid: true})
	if err != nil {
		return Record{}, wrap("get event", err)
	}
	recs, err := collectRecords(rows)
	if err != nil {
		return Record{}, wrap("get event", err)
	}
	if len(recs) == 0 {
		return Record{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return recs[0], nil
}

// DeadLetters lists up to limit dead-lettered events with IDs greater than
// after (the zero ID to start), in ID order, for paging through the
// dead-letter queue: pass the last ID of one page as after for the next.
func (s *Store) DeadLetters(ctx context.Context, limit int, after core.ID) ([]Record, error) {
	if limit < 1 {
		return nil, fmt.Errorf("outboxkit/postgres: dead letters: limit is %d; it must be at least 1", limit)
	}
	rows, err := s.db.Query(ctx, `SELECT `+recordColumns+`, now() FROM `+s.n.outbox+`
WHERE dead_at IS NOT NULL AND id > $1 ORDER BY id LIMIT $2`, pgtype.UUID{Bytes: after, Valid: true}, limit)
	if err != nil {
		return nil, wrap("list dead letters", err)
	}
	recs, err := collectRecords(rows)
	if err != nil {
		return nil, wrap("list dead letters", err)
	}
	return recs, nil
}

func collectRecords(rows pgx.Rows) ([]Record, error) {
	defer rows.Close()
	var out []Record
	var sc eventScanner
	for rows.Next() {
		var (
			r                           Record
			published, dead, leaseUntil pgtype.Timestamptz
			lastError                   pgtype.Text
			now                         time.Time
		)
		if err := rows.Scan(append(sc.dests(&r.Event), &published, &dead, &leaseUntil, &lastError, &now)...); err != nil {
			return nil, err
		}
		sc.finish(&r.Event)
		r.PublishedAt, r.DeadAt, r.LeaseUntil, r.LastError = published.Time, dead.Time, leaseUntil.Time, lastError.String
		switch {
		case published.Valid:
			r.State = StatePublished
		case dead.Valid:
			r.State = StateDeadLettered
		case leaseUntil.Valid && leaseUntil.Time.After(now):
			r.State = StateLeased
		default:
			r.State = StatePending
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
