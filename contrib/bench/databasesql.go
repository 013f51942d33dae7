package main

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/lib/pq"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// The database/sql path (-databasesql): what outboxkit costs a service
// whose data layer is database/sql, against the same work through pgx.
// Writers run the write workload's UPDATE alone and UPDATE + event in a
// *sql.Tx, the event added through postgres.SQL(tx); the drain runs the
// relay over a Store on a *sql.DB, whose claims and settlements go through
// database/sql (no pipelining). Both with lib/pq and with pgx's stdlib
// driver, beside the pgx cases of the same run.

// The database/sql drivers compared. lib/pq runs each statement with
// arguments in two round trips (parse and describe, then bind and
// execute) unless binary_parameters=yes, which it documents as the way to
// one: the tuned figure beside its defaults.
const (
	driverPQ       = "lib/pq"
	driverPQBinary = "lib/pq binary_parameters=yes"
	driverStdlib   = "pgx stdlib"
)

// sqlDrivers in the order the tables list them.
var sqlDrivers = []string{driverPQ, driverPQBinary, driverStdlib}

// System names of the database/sql variants.
func sysSQLWriter(driver string) string { return "outboxkit, *sql.Tx (" + driver + ")" }
func sysSQLDrain(driver string) string  { return "outboxkit on *sql.DB (" + driver + ")" }

// openSQLDB opens a *sql.DB of conns connections on dsn through driver,
// and opens them all before returning, so no measurement pays for
// connecting. The pool keeps them: no idle limit below conns, no lifetime.
func openSQLDB(ctx context.Context, driver, dsn string, conns int) (*sql.DB, error) {
	var db *sql.DB
	switch driver {
	case driverPQ, driverPQBinary:
		if driver == driverPQBinary {
			dsn = withParam(dsn, "binary_parameters", "yes")
		}
		c, err := pq.NewConnector(dsn)
		if err != nil {
			return nil, fmt.Errorf("lib/pq: parse -dsn: %w", err)
		}
		db = sql.OpenDB(c)
	case driverStdlib:
		c, err := pgx.ParseConfig(dsn)
		if err != nil {
			return nil, fmt.Errorf("pgx stdlib: parse -dsn: %w", err)
		}
		db = stdlib.OpenDB(*c)
	default:
		return nil, fmt.Errorf("unknown database/sql driver %q", driver)
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	if _, err := sqlBackendPIDs(ctx, db, conns); err != nil {
		db.Close()
		return nil, fmt.Errorf("PostgreSQL through %s at %s: %w", driver, redactDSN(dsn), err)
	}
	return db, nil
}

// withParam adds key=value to a URL or key=value DSN.
func withParam(dsn, key, value string) string {
	if !strings.Contains(dsn, "://") {
		return dsn + " " + key + "=" + value
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn // pq.NewConnector says what is wrong with it
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// sqlBackendPIDs holds n connections of db at once and returns their
// server process IDs; the connections go back to db's idle pool.
func sqlBackendPIDs(ctx context.Context, db *sql.DB, n int) ([]int, error) {
	conns := make([]*sql.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	pids := make([]int, 0, n)
	for i := 0; i < n; i++ {
		c, err := db.Conn(ctx)
		if err != nil {
			return nil, err
		}
		conns = append(conns, c)
		var pid int
		if err := c.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			return nil, fmt.Errorf("backend pid: %w", err)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// pidMeter starts measuring this process and the backends pids.
func pidMeter(pids []int) *cpuMeter {
	return &cpuMeter{pids: pids, proc0: cpuTime(), db0: pidsCPU(pids)}
}

// redactDSN hides a password in a URL DSN; a key=value one is not shown.
func redactDSN(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && strings.Contains(dsn, "://") {
		return u.Redacted()
	}
	return "-dsn"
}

// writeSQL is writeGo through database/sql: writers goroutines for the
// write duration, each committing a *sql.Tx that updates one random
// account and, with c.event, adds an event through postgres.SQL(tx).
func (b *bench) writeSQL(ctx context.Context, s *schema, c writeCase, profile string) (writeResult, error) {
	db, err := openSQLDB(ctx, c.driver, b.o.dsn, b.o.writers)
	if err != nil {
		return writeResult{}, err
	}
	defer db.Close()
	store, err := postgres.New(db, &postgres.Config{Schema: s.name, Notify: c.notify, Wakeup: postgres.WakeupPoll})
	if err != nil {
		return writeResult{}, err
	}
	pids, err := sqlBackendPIDs(ctx, db, b.o.writers)
	if err != nil {
		return writeResult{}, err
	}
	update := `UPDATE ` + s.table("accounts") + ` SET balance = balance + 1 WHERE id = $1`
	payload := []byte(benchPayload)
	tx1 := func(ctx context.Context, rng *rand.Rand) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() //nolint:errcheck // a no-op after Commit
		if _, err := tx.ExecContext(ctx, update, rng.IntN(accountRows)+1); err != nil {
			return err
		}
		if c.event {
			if err := store.Add(ctx, postgres.SQL(tx), core.Event{ID: core.NewID(), Type: "bench", Payload: payload}); err != nil {
				return err
			}
		}
		return tx.Commit()
	}
	return meteredLoop(ctx, b.o.writers, b.o.writeFor, pidMeter(pids), profile, tx1)
}

// sqlWriteCases are the write workload's database/sql cases (with
// -databasesql): UPDATE alone and UPDATE + event, per driver.
func (b *bench) sqlWriteCases() []writeCase {
	if !b.o.databaseSQL {
		return nil
	}
	var cases []writeCase
	for _, d := range sqlDrivers {
		cases = append(cases,
			writeCase{name: caseAlone, system: sysSQLWriter(d), driver: d},
			writeCase{name: caseEvent, system: sysSQLWriter(d), driver: d, event: true, notify: postgres.NotifyNone})
	}
	return cases
}

// sqlRatios are the database/sql variants' ratios to pgx in the same run.
func (b *bench) sqlRatios() {
	if !b.o.databaseSQL {
		return
	}
	r := b.rep
	for _, d := range sqlDrivers {
		for _, cas := range []string{caseAlone, caseEvent} {
			r.ratio("write", cas, "*sql.Tx ("+d+") / pgx.Tx", "tx/s", sysSQLWriter(d), sysOutboxkit)
			r.ratio("write", cas, "Go CPU per tx: *sql.Tx ("+d+") / pgx.Tx", "Go CPU µs/tx", sysSQLWriter(d), sysOutboxkit)
			r.ratio("write", cas, "PG CPU per tx: *sql.Tx ("+d+") / pgx.Tx", "PG CPU µs/tx", sysSQLWriter(d), sysOutboxkit)
		}
		r.ratioOf("write", "with event / alone (*sql.Tx, "+d+")", "tx/s", caseEvent, sysSQLWriter(d), caseAlone, sysSQLWriter(d))
		for _, batch := range b.o.batches {
			cas := fmt.Sprintf("batch=%d", batch)
			r.ratio("drain", cas, "*sql.DB ("+d+") / *pgxpool.Pool", "events/s", sysSQLDrain(d), sysOutboxkit)
			r.ratio("drain", cas, "Go CPU per event: *sql.DB ("+d+") / *pgxpool.Pool", "Go CPU µs/event", sysSQLDrain(d), sysOutboxkit)
			r.ratio("drain", cas, "PG CPU per event: *sql.DB ("+d+") / *pgxpool.Pool", "PG CPU µs/event", sysSQLDrain(d), sysOutboxkit)
		}
	}
}
