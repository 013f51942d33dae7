package postgres

import (
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outboxkit/core"
)

// Scanning: reading a row's eventColumns into a core.Event, whatever
// values a plain-SQL writer stored in them.

// eventScanner reads the eventColumns of a row into a core.Event. Its scratch
// fields are reused across rows.
type eventScanner struct {
	id             pgtype.UUID
	version        int32
	seq            pgtype.Int8
	headers        []byte
	att            int32
	created, avail pgtype.Timestamptz
}

func (sc *eventScanner) dests(e *core.Event) []any { return sc.appendDests(nil, e) }

// appendDests is dests appending to dst, so a loop can reuse one slice.
func (sc *eventScanner) appendDests(dst []any, e *core.Event) []any {
	return append(dst, &sc.id, &e.Type, &sc.version, &e.Source, &e.AggregateType, &e.AggregateID, &sc.seq,
		(*[]byte)(&e.Payload), &sc.headers, &e.Destination, &sc.created, &sc.avail, &sc.att)
}

func (sc *eventScanner) finish(e *core.Event) {
	e.ID = sc.id.Bytes
	e.SchemaVersion = int(sc.version)
	if sc.seq.Valid {
		e.Sequence = sc.seq.Int64
	}
	e.Attempts = int(sc.att)
	e.Headers = decodeHeaders(sc.headers)
	e.CreatedAt = finiteTime(sc.created)
	e.AvailableAt = finiteTime(sc.avail)
}

// finiteTime reads a timestamptz that may be 'infinity' or '-infinity',
// which a plain-SQL writer can store and time.Time cannot hold, as the zero
// time ("unknown"). Failing the scan instead would fail every claim that
// includes the row, after the claim had leased it: the row would stay the
// oldest due and stall the relay for good.
func finiteTime(t pgtype.Timestamptz) time.Time {
	if !t.Valid || t.InfinityModifier != pgtype.Finite {
		return time.Time{}
	}
	return t.Time
}

// decodeHeaders reads the headers column. It never fails: a row written by
// another service with non-string values keeps them as their JSON text, so
// one odd row cannot stop the relay.
func decodeHeaders(b []byte) map[string]string {
	if len(b) <= 2 { // "{}" (the column is checked to hold an object)
		return nil
	}
	var h map[string]string
	if err := json.Unmarshal(b, &h); err == nil {
		return h
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil
	}
	h = make(map[string]string, len(raw))
	for k, v := range raw {
		var str string
		if json.Unmarshal(v, &str) == nil {
			h[k] = str
		} else {
			h[k] = string(v)
		}
	}
	return h
}
