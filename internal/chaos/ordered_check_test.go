package chaos_test

import (
	"context"
	"fmt"
	"strings"
)

// orderedOutcome is what the database and qstashdev say about an ordered
// run. Events are the outbox rows of an aggregate; effects the rows of
// ordered_effects, one per application.
type orderedOutcome struct {
	aggregates, events, effects int
	missing                     int // events without an effect
	duplicates                  int // effects beyond the first of an (aggregate, sequence)
	strays                      int // effects matching no event (ID, aggregate and sequence)
	outOfOrder                  int // effects applied after one of a higher sequence of their aggregate
	misnumbered                 int // events whose sequence is not their position in the producer's order
	wrongCount                  int // aggregates whose events are not exactly those the producer committed
	pending, dead               int // outbox rows neither published nor dead-lettered; dead-lettered
	parked, openGaps            int // the Sequencer's parked events and gaps still open
	behind                      int // aggregates whose last applied sequence is not their last event's
	dlq                         int // messages in qstashdev's DLQ
}

// problems lists every broken promise; empty means the run is clean.
func (o orderedOutcome) problems() []string {
	var p []string
	add := func(n int, what string) {
		if n != 0 {
			p = append(p, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(o.missing, "events never applied")
	add(o.duplicates, "effects applied more than once")
	add(o.strays, "effects that match no event's ID, aggregate and sequence")
	add(o.outOfOrder, "effects applied after a later event of their aggregate")
	add(o.misnumbered, "events whose sequence is not their position in the aggregate")
	add(o.wrongCount, "aggregates whose committed events the outbox does not hold exactly")
	add(o.pending, "outbox rows neither published nor dead-lettered")
	add(o.dead, "outbox rows dead-lettered")
	add(o.parked, "events parked by the Sequencer")
	add(o.openGaps, "sequence gaps still open")
	add(o.behind, "aggregates whose last applied sequence is not their last event's")
	add(o.dlq, "messages dead-lettered by QStash")
	return p
}

// orderedNames replaces the table names of the ordered checks in SQL.
func (e *env) orderedNames() *strings.Replacer {
	return strings.NewReplacer("EFFECTS", e.table("ordered_effects"), "OUTBOX", e.table("outbox_events"),
		"PARKED", e.table("outbox_events_sequence_parked"), "GAPS", e.table("outbox_events_sequence_gaps"),
		"SEQS", e.table("outbox_events_sequences"))
}

// checkOrdered reads the outcome of an ordered run. committed maps each
// aggregate to the events the producer committed for it (nil: not
// checked).
func (e *env) checkOrdered(ctx context.Context, committed map[string]int) (orderedOutcome, error) {
	var o orderedOutcome
	err := e.pool.QueryRow(ctx, e.orderedNames().Replace(`SELECT
		(SELECT count(DISTINCT aggregate_id) FROM OUTBOX WHERE aggregate_id <> ''),
		(SELECT count(*) FROM OUTBOX WHERE aggregate_id <> ''),
		(SELECT count(*) FROM EFFECTS),
		(SELECT count(*) FROM OUTBOX x WHERE aggregate_id <> '' AND NOT EXISTS (SELECT FROM EFFECTS f WHERE f.event_id = x.id)),
		(SELECT count(*) - count(DISTINCT (aggregate_id, sequence)) FROM EFFECTS),
		(SELECT count(*) FROM EFFECTS f WHERE NOT EXISTS (SELECT FROM OUTBOX x
			WHERE x.id = f.event_id AND x.aggregate_id = f.aggregate_id AND x.sequence = f.sequence)),
		(SELECT count(*) FROM (SELECT sequence, max(sequence) OVER (PARTITION BY aggregate_id ORDER BY serial
			ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before FROM EFFECTS) s WHERE before > sequence),
		(SELECT count(*) FROM OUTBOX WHERE aggregate_id <> '' AND (payload->>'step')::bigint IS DISTINCT FROM sequence),
		(SELECT count(*) FROM OUTBOX WHERE published_at IS NULL AND dead_at IS NULL),
		(SELECT count(*) FROM OUTBOX WHERE dead_at IS NOT NULL),
		(SELECT count(*) FROM PARKED),
		(SELECT count(*) FROM GAPS),
		(SELECT count(*) FROM (SELECT aggregate_type, aggregate_id, max(sequence) AS last FROM OUTBOX
			WHERE aggregate_id <> '' GROUP BY 1, 2) x
			LEFT JOIN SEQS s ON s.consumer = 'chaos' AND s.aggregate_type = x.aggregate_type AND s.aggregate_id = x.aggregate_id
			WHERE s.last_sequence IS DISTINCT FROM x.last)`)).Scan(
		&o.aggregates, &o.events, &o.effects, &o.missing, &o.duplicates, &o.strays, &o.outOfOrder, &o.misnumbered,
		&o.pending, &o.dead, &o.parked, &o.openGaps, &o.behind)
	if err != nil {
		return o, fmt.Errorf("check ordered: %w", err)
	}
	o.dlq = len(e.qs.DLQ())
	if committed == nil {
		return o, nil
	}
	rows, err := e.pool.Query(ctx, e.orderedNames().Replace(`SELECT aggregate_id, count(*), min(sequence), max(sequence)
		FROM OUTBOX WHERE aggregate_id <> '' GROUP BY aggregate_id`))
	if err != nil {
		return o, fmt.Errorf("check ordered: %w", err)
	}
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var (
			agg            string
			n, first, last int64
		)
		if err := rows.Scan(&agg, &n, &first, &last); err != nil {
			return o, err
		}
		seen++
		if want, ok := committed[agg]; !ok || n != int64(want) || first != 1 || last != n {
			o.wrongCount++
		}
	}
	for _, n := range committed {
		if n > 0 {
			seen--
		}
	}
	if seen < 0 {
		o.wrongCount -= seen // aggregates committed that the outbox lacks
	}
	return o, rows.Err()
}

// sequencerCounts are the ordered consumer's reports, summed over its
// incarnations.
type sequencerCounts struct {
	gaps, stale, alerts, parked, overGap, failBefore, violations int64
}

func (e *env) sequencerCounts() sequencerCounts {
	return sequencerCounts{
		gaps: e.seqGaps.Load(), stale: e.seqStale.Load(), alerts: e.seqAlerts.Load(), parked: e.seqParked.Load(),
		overGap: e.seqOverGap.Load(), failBefore: e.failBefore.Load(), violations: e.orderViolations.Load(),
	}
}
