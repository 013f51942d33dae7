package postgres

import (
	"errors"
	"reflect"

	"github.com/jackc/pgx/v5/pgconn"
)

// Server errors through database/sql. pgx's stdlib driver returns
// *pgconn.PgError as pgx does; lib/pq returns its own *pq.Error. The
// package (interpretError, mayHaveRun) and its callers look for
// *pgconn.PgError, so a driver's error that carries a SQLSTATE is
// wrapped to offer one as well, read from the fields lib/pq and drivers
// like it name as pgconn does (Code, Message, Detail, Constraint, ...).
// The driver's own error stays in the chain.

// driverError is a driver's server error that also answers as a
// *pgconn.PgError.
type driverError struct {
	err error
	pg  *pgconn.PgError
}

func (e *driverError) Error() string   { return e.err.Error() }
func (e *driverError) Unwrap() []error { return []error{e.err, e.pg} }

// sqlError returns err with a *pgconn.PgError in its chain when err is a
// server error that does not have one already.
func sqlError(err error) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return err
	}
	pg := pgErrorOf(err)
	if pg == nil {
		return err
	}
	return &driverError{err: err, pg: pg}
}

// pgErrorOf reads a server error's fields off the first error in err's
// chain that is a struct (or pointer to one) with a five-character string
// Code field, or returns nil.
func pgErrorOf(err error) *pgconn.PgError {
	for e := err; e != nil; e = errors.Unwrap(e) {
		v := reflect.ValueOf(e)
		if v.Kind() == reflect.Pointer {
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			continue
		}
		code := stringField(v, "Code")
		if len(code) != 5 {
			continue
		}
		return &pgconn.PgError{
			Severity:       stringField(v, "Severity"),
			Code:           code,
			Message:        stringField(v, "Message"),
			Detail:         stringField(v, "Detail"),
			Hint:           stringField(v, "Hint"),
			Where:          stringField(v, "Where"),
			SchemaName:     stringField(v, "Schema"),
			TableName:      stringField(v, "Table"),
			ColumnName:     stringField(v, "Column"),
			DataTypeName:   stringField(v, "DataTypeName"),
			ConstraintName: stringField(v, "Constraint"),
		}
	}
	return nil
}

func stringField(v reflect.Value, name string) string {
	f := v.FieldByName(name)
	if !f.IsValid() || f.Kind() != reflect.String {
		return ""
	}
	return f.String()
}
