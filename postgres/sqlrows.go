package postgres

import (
	"database/sql"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// Rows through database/sql. The package scans into pgx's destinations
// (pgtype values, [16]byte IDs, arrays, 'infinity' timestamps). A
// database/sql driver hands over each value as text ([]byte or string),
// or already parsed (time.Time, int64, bool, float64). sqlRows reads the
// columns' PostgreSQL types once and decodes every value with pgx's own
// text decoders, so a row scans the same through any driver as through
// pgx, errors included.

// sqlRows is *sql.Rows as pgx.Rows.
type sqlRows struct {
	rows *sql.Rows
	oids []uint32 // per column; 0 when the driver did not name the type
	vals []any
	ptrs []any
	err  error
}

func newSQLRows(rows *sql.Rows) *sqlRows { return &sqlRows{rows: rows} }

var _ pgx.Rows = (*sqlRows)(nil)

func (r *sqlRows) Close() { _ = r.rows.Close() }

func (r *sqlRows) Err() error {
	if r.err != nil {
		return r.err
	}
	return sqlError(r.rows.Err())
}

func (r *sqlRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (r *sqlRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (r *sqlRows) RawValues() [][]byte                          { return nil }
func (r *sqlRows) Conn() *pgx.Conn                              { return nil }

// TypeMap returns pgx's default type map; the driver's own is not
// reachable through database/sql.
func (r *sqlRows) TypeMap() *pgtype.Map { return pgtype.NewMap() }

func (r *sqlRows) Next() bool {
	if r.err != nil {
		return false
	}
	if !r.rows.Next() {
		return false
	}
	if r.oids == nil {
		if err := r.columns(); err != nil {
			r.err = err
			_ = r.rows.Close()
			return false
		}
	}
	if err := r.rows.Scan(r.ptrs...); err != nil {
		r.err = sqlError(err)
		_ = r.rows.Close()
		return false
	}
	return true
}

// columns learns the columns' types from the driver's type names.
func (r *sqlRows) columns() error {
	cts, err := r.rows.ColumnTypes()
	if err != nil {
		return err
	}
	m := typeMaps.Get().(*pgtype.Map)
	defer typeMaps.Put(m)
	r.oids = make([]uint32, len(cts))
	r.vals = make([]any, len(cts))
	r.ptrs = make([]any, len(cts))
	for i, ct := range cts {
		if t, ok := m.TypeForName(strings.ToLower(ct.DatabaseTypeName())); ok {
			r.oids[i] = t.OID
		}
		r.ptrs[i] = &r.vals[i]
	}
	return nil
}

func (r *sqlRows) Scan(dest ...any) error {
	if len(dest) != len(r.vals) {
		return errors.New("outboxkit/postgres: scan: " + strconv.Itoa(len(dest)) + " destinations for " + strconv.Itoa(len(r.vals)) + " columns")
	}
	m := typeMaps.Get().(*pgtype.Map)
	defer typeMaps.Put(m)
	for i, d := range dest {
		if d == nil {
			continue
		}
		if err := scanValue(m, r.oids[i], r.vals[i], d); err != nil {
			return errors.New("outboxkit/postgres: scan column " + strconv.Itoa(i) + ": " + err.Error())
		}
	}
	return nil
}

func (r *sqlRows) Values() ([]any, error) { return append([]any(nil), r.vals...), nil }

// scanValue decodes src, a column of type oid (0: unknown) as the driver
// gave it, into dest.
func scanValue(m *pgtype.Map, oid uint32, src, dest any) error {
	if oid == 0 {
		oid = guessOID(src)
	}
	switch v := src.(type) {
	case nil:
		return m.Scan(oid, pgtype.TextFormatCode, nil, dest)
	case []byte:
		if oid == pgtype.ByteaOID {
			// Drivers hand bytea over decoded.
			return m.Scan(oid, pgtype.BinaryFormatCode, v, dest)
		}
		return m.Scan(oid, pgtype.TextFormatCode, v, dest)
	case string:
		return m.Scan(oid, pgtype.TextFormatCode, []byte(v), dest)
	case time.Time:
		switch d := dest.(type) {
		case *time.Time:
			*d = v
			return nil
		case sql.Scanner:
			return d.Scan(v)
		}
		return m.Scan(oid, pgtype.TextFormatCode, []byte(v.Format("2006-01-02 15:04:05.999999999-07:00")), dest)
	case int64:
		return m.Scan(oid, pgtype.TextFormatCode, strconv.AppendInt(nil, v, 10), dest)
	case float64:
		return m.Scan(oid, pgtype.TextFormatCode, strconv.AppendFloat(nil, v, 'g', -1, 64), dest)
	case bool:
		t := []byte("f")
		if v {
			t[0] = 't'
		}
		return m.Scan(oid, pgtype.TextFormatCode, t, dest)
	}
	return errors.New("cannot scan a " + reflect.TypeOf(src).String())
}

// guessOID is the type a value of unknown column type is decoded as.
func guessOID(src any) uint32 {
	switch src.(type) {
	case int64:
		return pgtype.Int8OID
	case float64:
		return pgtype.Float8OID
	case bool:
		return pgtype.BoolOID
	case time.Time:
		return pgtype.TimestamptzOID
	}
	return pgtype.TextOID
}

// sqlRow is QueryRow's result through database/sql.
type sqlRow struct {
	rows pgx.Rows
	err  error
}

func (r sqlRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}
