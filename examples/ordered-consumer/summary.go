package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// summary is what a run observed. The counts of effects come from the
// consumer's tables, not from counters, so they say what really committed.
type summary struct {
	Orders, Events int
	// Applied counts status changes in tracking_log (must be Events).
	Applied int
	// Gaps counts deliveries the Sequencer held back because their
	// predecessor was not applied yet (answered 503 + Retry-After).
	Gaps int64
	// Stale counts deliveries of events applied already (lost
	// acknowledgements, replays), acknowledged without effect.
	Stale int64
	// Expected stale deliveries: one per lost acknowledgement and replay.
	LostAcks, Replayed int
	// Failures counts first handler runs failed on purpose.
	Failures int
	// NotDelivered counts orders whose final status is not "delivered".
	NotDelivered int
	// OutOfOrder counts applied status changes that did not directly follow
	// their predecessor in tracking_log: out of order, repeated or skipping
	// one.
	OutOfOrder   int
	DeadLettered int // QStash DLQ entries
	Pending      int64
	Elapsed      time.Duration
}

func (s summary) ok() bool { return s.problem() == "" }

func (s summary) problem() string {
	var p []string
	if s.NotDelivered != 0 {
		p = append(p, fmt.Sprintf("%d orders not delivered", s.NotDelivered))
	}
	if s.OutOfOrder != 0 {
		p = append(p, fmt.Sprintf("%d status changes applied out of order", s.OutOfOrder))
	}
	if s.Applied != s.Events {
		p = append(p, fmt.Sprintf("%d status changes applied, want %d", s.Applied, s.Events))
	}
	if s.DeadLettered != 0 {
		p = append(p, fmt.Sprintf("%d dead letters", s.DeadLettered))
	}
	if s.Pending != 0 {
		p = append(p, fmt.Sprintf("%d events still pending in the outbox", s.Pending))
	}
	return strings.Join(p, "; ")
}

// check reads the consumer's tables: orders not delivered, status changes
// applied, and those that did not follow their predecessor directly (by the
// order tracking_log's serial gives them, which is commit order per order:
// the Sequencer serialises an order's deliveries on its row).
func (t *tracking) check(ctx context.Context, pool *pgxpool.Pool, s *summary) error {
	var delivered int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+t.table+" WHERE status = 'delivered'").Scan(&delivered); err != nil {
		return fmt.Errorf("count delivered orders: %w", err)
	}
	s.NotDelivered = s.Orders - delivered
	err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE sequence <> prev + 1 OR status <> (ARRAY['placed','paid','shipped','delivered'])[sequence::int])
FROM (SELECT sequence, status, lag(sequence, 1, 0::bigint) OVER (PARTITION BY order_id ORDER BY id) AS prev FROM `+t.log+`) l`).Scan(&s.Applied, &s.OutOfOrder)
	if err != nil {
		return fmt.Errorf("check order of status changes: %w", err)
	}
	return nil
}

func printSummary(out io.Writer, s summary) {
	fmt.Fprintf(out, `
summary
  orders                          %d   (%d status events)
  events applied                  %d
  early deliveries held back      %d   (gaps: answered 503, delivered again)
  stale deliveries dropped        %d   (lost acknowledgements %d, replayed %d)
  failures injected               %d   (handler %d, lost acknowledgements %d)
  dead-lettered                   %d
  orders not delivered            %d
  applied out of order            %d
  elapsed                         %s
`, s.Orders, s.Events, s.Applied, s.Gaps, s.Stale, s.LostAcks, s.Replayed,
		s.Failures+s.LostAcks, s.Failures, s.LostAcks, s.DeadLettered, s.NotDelivered, s.OutOfOrder, s.Elapsed.Round(time.Millisecond))
}
