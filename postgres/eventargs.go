package postgres

import (
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outboxkit/core"
)

// The writing statements (Add's and Accept's, add_sql.go and accept_sql.go)
// take an event's columns in one order: id, event_type, schema_version,
// source, aggregate_type, aggregate_id, sequence, payload, headers,
// destination, created_at and, for Add, available_at. The one-row forms
// take them as scalars, the unnest forms as one array per column; both are
// built here so the two writers cannot drift apart.

// eventArgs returns the one-row statements' arguments for e, with
// available_at when withAvailable.
func eventArgs(e *core.Event, withAvailable bool) ([]any, error) {
	h, err := headersJSON(e)
	if err != nil {
		return nil, err
	}
	args := []any{
		pgtype.UUID{Bytes: e.ID, Valid: true}, e.Type, int32(max(e.SchemaVersion, 1)), e.Source,
		e.AggregateType, e.AggregateID, pgtype.Int8{Int64: e.Sequence, Valid: e.Sequence != 0},
		e.Payload, h, e.Destination, optionalTime(e.CreatedAt),
	}
	if withAvailable {
		args = append(args, optionalTime(e.AvailableAt))
	}
	return args, nil
}

// eventColumnArgs returns the unnest statements' arguments for events, one
// array per column (available_at when withAvailable), and whether any
// event names an aggregate.
func eventColumnArgs(events []core.Event, withAvailable bool) (args []any, aggregated bool, err error) {
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
		availAt   []pgtype.Timestamptz
	)
	if withAvailable {
		availAt = make([]pgtype.Timestamptz, n)
	}
	for i := range events {
		e := &events[i]
		if headers[i], err = headersJSON(e); err != nil {
			return nil, false, err
		}
		ids[i] = pgtype.UUID{Bytes: e.ID, Valid: true}
		types[i] = e.Type
		versions[i] = int32(max(e.SchemaVersion, 1))
		sources[i] = e.Source
		aggTypes[i] = e.AggregateType
		aggIDs[i] = e.AggregateID
		aggregated = aggregated || e.AggregateID != ""
		seqs[i] = pgtype.Int8{Int64: e.Sequence, Valid: e.Sequence != 0}
		payloads[i] = e.Payload
		dests[i] = e.Destination
		createdAt[i] = optionalTime(e.CreatedAt)
		if withAvailable {
			availAt[i] = optionalTime(e.AvailableAt)
		}
	}
	args = []any{ids, types, versions, sources, aggTypes, aggIDs, seqs, payloads, headers, dests, createdAt}
	if withAvailable {
		args = append(args, availAt)
	}
	return args, aggregated, nil
}

// headersJSON is the headers column of e: a JSON object, {} for none.
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
