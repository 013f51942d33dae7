package postgres

import (
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Arguments through database/sql. The package builds its arguments for
// pgx (pgtype values, Go slices for array parameters, time.Duration for
// intervals, json.RawMessage for jsonb). A database/sql driver accepts
// only a few Go types, and each encodes the rest its own way (lib/pq
// turns a slice of JSON documents into a bytea array, whose elements a
// jsonb[] parameter reads as strings: the headers' check constraint then
// refuses the row, TestAddInSQLTx in adapters/databasesql). So every
// argument is turned into one of the types all drivers send alike: its
// PostgreSQL text form as a string (numbers too), a bool, a time.Time,
// or nil. The statements cast every parameter to its type, so the server
// reads the text as the right type whatever the driver declares.

// typeMaps lends pgtype.Maps, which are not safe for concurrent use, to the
// conversions here and in sqlrows.go.
var typeMaps = sync.Pool{New: func() any { return pgtype.NewMap() }}

// sqlArgs converts a statement's pgx arguments for database/sql. A
// leading pgx.QueryExecMode (plans.go) is dropped: database/sql has no
// such choice.
func sqlArgs(args []any) ([]any, error) {
	if len(args) > 0 {
		if _, ok := args[0].(pgx.QueryExecMode); ok {
			args = args[1:]
		}
	}
	out := make([]any, len(args))
	var m *pgtype.Map
	defer func() {
		if m != nil {
			typeMaps.Put(m)
		}
	}()
	for i, a := range args {
		v, err := sqlArg(a, &m)
		if err != nil {
			return nil, fmt.Errorf("outboxkit/postgres: parameter $%d: %w", i+1, err)
		}
		out[i] = v
	}
	return out, nil
}

func sqlArg(a any, m **pgtype.Map) (any, error) {
	switch v := a.(type) {
	case nil, string, bool, float64, time.Time:
		return v, nil
	case int64:
		// As text, like every other number: a driver that writes the
		// arguments into the statement (bun's pgdriver) would write the
		// claim floor's math.MinInt64 as -9223372036854775808::int8,
		// which PostgreSQL reads as the negation of an out-of-range
		// literal (TestPgdriverStoreClaims in adapters/bun).
		return strconv.FormatInt(v, 10), nil
	case int:
		return strconv.FormatInt(int64(v), 10), nil
	case int32:
		return strconv.FormatInt(int64(v), 10), nil
	case int16:
		return strconv.FormatInt(int64(v), 10), nil
	case []byte:
		return string(v), nil
	case json.RawMessage:
		return string(v), nil
	case time.Duration:
		// An interval: microseconds are what PostgreSQL keeps.
		return strconv.FormatInt(v.Microseconds(), 10) + " microseconds", nil
	case driver.Valuer:
		dv, err := v.Value()
		if err != nil {
			return nil, err
		}
		if _, again := dv.(driver.Valuer); again {
			return dv, nil // cannot happen for a driver.Value
		}
		return sqlArg(dv, m)
	}
	// Arrays and anything else pgx knows: its text form.
	if *m == nil {
		*m = typeMaps.Get().(*pgtype.Map)
	}
	t, ok := (*m).TypeForValue(a)
	if !ok {
		return nil, fmt.Errorf("cannot pass a %T through database/sql", a)
	}
	buf, err := (*m).Encode(t.OID, pgtype.TextFormatCode, a, nil)
	if err != nil {
		return nil, err
	}
	if buf == nil {
		return nil, nil
	}
	return string(buf), nil
}
