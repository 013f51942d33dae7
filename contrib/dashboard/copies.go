package dashboard

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// An event ID is unique per partition only on the partitioned layout
// (docs/SCHEMA.md, "ID uniqueness, honestly"): a foreign writer reusing
// an ID with creation times in two periods leaves two rows with one ID.
// The event page therefore looks the ID up with its creation times
// first, and when it finds several rows shows one of them in full, by
// (id, created_at), which on that layout is unique, naming the others.

// maxCopies bounds the rows of one ID the event page names.
const maxCopies = 10

// eventCopy is one row holding an event ID.
type eventCopy struct {
	CreatedAt time.Time
	Partition string
	// Shown is the row the page shows.
	Shown bool
}

// Created is the copy's creation time as the event page's created
// parameter carries it.
func (c eventCopy) Created() string { return c.CreatedAt.UTC().Format(time.RFC3339Nano) }

// readCopies lists the rows holding id, oldest first.
func readCopies(ctx context.Context, t *target, id core.ID) ([]eventCopy, error) {
	rows, err := t.Pool.Query(ctx, `SELECT created_at, tableoid::regclass::text FROM `+t.n.outbox+`
WHERE id = $1 ORDER BY created_at LIMIT `+strconv.Itoa(maxCopies), pgtype.UUID{Bytes: id, Valid: true})
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []eventCopy
	for rows.Next() {
		var c eventCopy
		var at pgtype.Timestamptz
		if err := rows.Scan(&at, &c.Partition); err != nil {
			return nil, err
		}
		c.CreatedAt = at.Time
		out = append(out, c)
	}
	return out, rows.Err()
}

// readCopy reads the row of id created at createdAt: one row, since
// (id, created_at) is unique on the partitioned layout. It reads what
// Store.Get does, which finds an ID only.
func readCopy(ctx context.Context, t *target, id core.ID, createdAt time.Time) (postgres.Record, error) {
	var (
		r                      postgres.Record
		rid                    pgtype.UUID
		version                int32
		seq                    pgtype.Int8
		headers                []byte
		created, avail         pgtype.Timestamptz
		attempts               int32
		published, dead, lease pgtype.Timestamptz
		lastError              pgtype.Text
		now                    time.Time
		payload                []byte
	)
	err := t.Pool.QueryRow(ctx, `SELECT id, event_type, schema_version, source, aggregate_type, aggregate_id, sequence,
	payload, headers, destination, created_at, available_at, attempts, published_at, dead_at, lease_until, last_error, now()
FROM `+t.n.outbox+` WHERE id = $1 AND created_at = $2 LIMIT 1`, pgtype.UUID{Bytes: id, Valid: true}, createdAt).Scan(
		&rid, &r.Type, &version, &r.Source, &r.AggregateType, &r.AggregateID, &seq,
		&payload, &headers, &r.Destination, &created, &avail, &attempts, &published, &dead, &lease, &lastError, &now)
	if err != nil {
		return r, err
	}
	r.ID, r.SchemaVersion, r.Attempts, r.Payload = rid.Bytes, int(version), int(attempts), payload
	if seq.Valid {
		r.Sequence = seq.Int64
	}
	r.Headers = headerMap(headers)
	r.CreatedAt, r.AvailableAt = finite(created), finite(avail)
	r.PublishedAt, r.DeadAt, r.LeaseUntil, r.LastError = finite(published), finite(dead), finite(lease), lastError.String
	r.State = postgres.State(stateOf(published.Valid, dead.Valid, lease.Valid && lease.Time.After(now)))
	return r, nil
}

// finite is a timestamptz as a time, zero for NULL and ±infinity.
func finite(t pgtype.Timestamptz) time.Time {
	if !t.Valid || t.InfinityModifier != pgtype.Finite {
		return time.Time{}
	}
	return t.Time
}

// headerMap reads the headers column as the store does: a value that is
// not a string is kept as its JSON text.
func headerMap(b []byte) map[string]string {
	var raw map[string]json.RawMessage
	if json.Unmarshal(b, &raw) != nil || len(raw) == 0 {
		return nil
	}
	h := make(map[string]string, len(raw))
	for k, v := range raw {
		var s string
		if json.Unmarshal(v, &s) == nil {
			h[k] = s
		} else {
			h[k] = string(v)
		}
	}
	return h
}
