package chaos_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/qstash"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

// outcome is what the database, qstashdev and the proxy say about a run.
type outcome struct {
	committed     int // orders whose transaction committed (kind ok or unknown)
	unknown       int // of which of an unknown type
	applied       int // effects rows
	lost          int // committed ok orders without an effect
	doubles       int // effects applied more than once
	phantoms      int // effects, outbox rows or publishes with no committed order
	pending       int // outbox rows neither published nor dead-lettered
	outboxDead    int // outbox rows dead-lettered
	unknownMissed int // unknown-type events that are not in QStash's DLQ
	unknownDone   int // unknown-type events in QStash's DLQ, without effect
	processed     int // rows of the Deduper's processed table
	redeliveries  int // deliveries the Deduper suppressed (duplicates)
	republished   int // publishes qstashdev accepted beyond an event's first
	rolledBack    int
}

// problems lists every broken promise; empty means the run is clean.
func (o outcome) problems() []string {
	var p []string
	if o.lost != 0 {
		p = append(p, fmt.Sprintf("%d committed events lost (no effect)", o.lost))
	}
	if o.doubles != 0 {
		p = append(p, fmt.Sprintf("%d effects applied more than once", o.doubles))
	}
	if o.phantoms != 0 {
		p = append(p, fmt.Sprintf("%d effects, outbox rows or publishes of events whose transaction rolled back", o.phantoms))
	}
	if o.pending != 0 {
		p = append(p, fmt.Sprintf("%d outbox rows neither published nor dead-lettered", o.pending))
	}
	if o.unknownMissed != 0 {
		p = append(p, fmt.Sprintf("%d unknown-type events not dead-lettered by QStash", o.unknownMissed))
	}
	if o.processed != o.applied {
		p = append(p, fmt.Sprintf("the Deduper recorded %d events but %d effects exist", o.processed, o.applied))
	}
	return p
}

// check reads the outcome of a run. rolledBack are the IDs of events whose
// transaction rolled back on purpose.
func (e *env) check(ctx context.Context, rolledBack []core.ID) (outcome, error) {
	var o outcome
	o.rolledBack = len(rolledBack)
	rb := make([]pgtype.UUID, len(rolledBack))
	for i, id := range rolledBack {
		rb[i] = pgtype.UUID{Bytes: id, Valid: true}
	}
	q := strings.NewReplacer("ORDERS", e.table("orders"), "EFFECTS", e.table("effects"), "DUPS", e.table("dups"),
		"OUTBOX", e.table("outbox_events"), "PROCESSED", e.table("outbox_events_processed"))
	err := e.pool.QueryRow(ctx, q.Replace(`SELECT
		(SELECT count(*) FROM ORDERS),
		(SELECT count(*) FROM ORDERS WHERE kind = 'unknown'),
		(SELECT count(*) FROM EFFECTS),
		(SELECT count(*) FROM ORDERS o WHERE kind = 'ok' AND NOT EXISTS (SELECT 1 FROM EFFECTS f WHERE f.event_id = o.event_id)),
		(SELECT count(*) FROM EFFECTS WHERE applied > 1),
		(SELECT count(*) FROM EFFECTS f WHERE NOT EXISTS (SELECT 1 FROM ORDERS o WHERE o.event_id = f.event_id))
			+ (SELECT count(*) FROM OUTBOX x WHERE NOT EXISTS (SELECT 1 FROM ORDERS o WHERE o.event_id = x.id))
			+ (SELECT count(*) FROM OUTBOX WHERE id = ANY($1::uuid[])),
		(SELECT count(*) FROM OUTBOX WHERE published_at IS NULL AND dead_at IS NULL),
		(SELECT count(*) FROM OUTBOX WHERE dead_at IS NOT NULL),
		(SELECT count(*) FROM PROCESSED),
		(SELECT COALESCE(sum(n), 0) FROM DUPS)`), rb).Scan(
		&o.committed, &o.unknown, &o.applied, &o.lost, &o.doubles, &o.phantoms, &o.pending, &o.outboxDead, &o.processed, &o.redeliveries)
	if err != nil {
		return o, fmt.Errorf("check: %w", err)
	}
	for _, id := range rolledBack {
		if e.proxy.acceptedCount(id) > 0 {
			o.phantoms++
		}
	}
	o.republished = e.proxy.stats().republished

	// Unknown-type events must sit in QStash's DLQ (answered 489 once).
	inDLQ := make(map[string]bool)
	for _, d := range e.qs.DLQ() {
		inDLQ[eventIDOf(d.Message)] = true
	}
	rows, err := e.pool.Query(ctx, `SELECT event_id::text FROM `+e.table("orders")+` WHERE kind = 'unknown'`)
	if err != nil {
		return o, fmt.Errorf("check: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return o, err
		}
		if inDLQ[id] {
			o.unknownDone++
		} else {
			o.unknownMissed++
		}
	}
	return o, rows.Err()
}

// eventIDOf returns the ID of the event a QStash message carries: from its
// body, a CloudEvents structured-mode document (the publisher's default),
// or else from the ce-id header a binary-mode message forwards. "" when it
// carries none.
func eventIDOf(m qstashdev.Message) string {
	if e, err := qstash.DecodeStructuredEvent(m.Body); err == nil {
		return e.ID.String()
	}
	// qstashdev keeps forwarded names as the publisher spelled them.
	for k, v := range m.Header {
		if strings.EqualFold(k, "ce-id") && len(v) > 0 {
			return strings.ToLower(v[0])
		}
	}
	return ""
}
