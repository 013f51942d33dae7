package main

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// A replay keeps event IDs, and the transports that deduplicate key on
// the event ID: a replayed event published a moment ago is dropped as a
// duplicate of itself, the relay marks it published again, and the replay
// has done nothing. replay warns about the events it cannot deliver.

// dedupWindow is how long the relays' transport drops a message repeating
// an event ID it carried, and how it does so; zero for a transport that
// does not deduplicate.
func dedupWindow(transport string) (time.Duration, string) {
	switch transport {
	case "qstash":
		// QStash remembers an Upstash-Deduplication-Id for 10 minutes
		// (docs/QSTASH.md); the publisher sends the event ID.
		return 10 * time.Minute, "QStash drops a message whose Upstash-Deduplication-Id (the event ID, which a replay keeps) it saw in the last 10 minutes, and the relay then marks the event published again"
	case "nats":
		// The relay sets Nats-Msg-Id to the event ID; JetStream's
		// default duplicate window is 2 minutes.
		return 2 * time.Minute, "NATS JetStream drops a message whose Nats-Msg-Id (the event ID, which a replay keeps) it saw within the stream's duplicate window (2m unless the stream sets another), and the relay then marks the event published again"
	}
	return 0, ""
}

// recentCount is what a replay filter matches: matched events (published
// or dead-lettered), and of those the recent ones, published within the
// window, with the latest publish time.
type recentCount struct {
	matched, recent int64
	lastPublished   time.Time
}

// recentlyPublished counts what a replay with f would take, and which of
// those were published within window. It must select the rows
// postgres.Store.Replay selects; TestRecentlyPublishedMatchesReplay holds
// the two together.
func (a *app) recentlyPublished(ctx context.Context, pool *pgxpool.Pool, f core.ReplayFilter, window time.Duration) (recentCount, error) {
	where, args, err := replayFilterSQL(f)
	if err != nil {
		return recentCount{}, err
	}
	args = append(args, window.Microseconds())
	recent := "published_at > now() - $" + strconv.Itoa(len(args)) + " * interval '1 microsecond'"
	sql := `SELECT count(*), count(*) FILTER (WHERE ` + recent + `), max(published_at) FILTER (WHERE ` + recent + `)
FROM ` + pgx.Identifier{a.g.schema, a.g.table}.Sanitize() + `
WHERE (published_at IS NOT NULL OR dead_at IS NOT NULL)` + where
	var c recentCount
	var last *time.Time
	if err := pool.QueryRow(ctx, sql, args...).Scan(&c.matched, &c.recent, &last); err != nil {
		return recentCount{}, a.dbError(err)
	}
	if last != nil {
		c.lastPublished = *last
	}
	return c, nil
}

// replayFilterSQL is postgres's replay filter as "AND ..." conditions. The
// outbox table's columns are its public contract, so reading them here is
// safe; the store offers no count of what a replay takes.
func replayFilterSQL(f core.ReplayFilter) (string, []any, error) {
	if f.Empty() {
		return "", nil, postgres.ErrEmptyFilter
	}
	var b strings.Builder
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		b.WriteString(" AND ")
		b.WriteString(strings.ReplaceAll(cond, "$?", "$"+strconv.Itoa(len(args))))
	}
	if len(f.IDs) > 0 {
		ids := make([]string, len(f.IDs))
		for i, id := range f.IDs {
			ids[i] = id.String()
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
		b.WriteString(" AND dead_at IS NOT NULL")
	}
	return b.String(), args, nil
}

// warnDeduplicated tells the operator that recent.recent of the replayed
// events will be dropped by the transport, and what to do about it.
func (a *app) warnDeduplicated(transport string, replayed int64, c recentCount) {
	window, how := dedupWindow(transport)
	if window == 0 || c.recent == 0 || replayed == 0 {
		return
	}
	a.warn("%d of the %d replayed event(s) were published less than %s ago and will not be delivered again: %s. Replay them again after %s, when the window has passed, or relay them through a transport without deduplication (outboxctl relay --transport amqp)",
		min(c.recent, replayed), replayed, formatDuration(window), how, rfc3339(c.lastPublished.Add(window).Add(time.Second).Truncate(time.Second)))
}
