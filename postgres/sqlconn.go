package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// database/sql, behind the pgx-shaped seam. The package's statements are
// written once, for pgx; these types run them through a database/sql
// handle, converting the arguments (sqlargs.go) and the scanned values
// (sqlrows.go) so both drivers read and write the same columns the same
// way.

// SQLQuerier is what outboxkit needs from a database/sql handle. *sql.DB,
// *sql.Tx and *sql.Conn satisfy it, and so do the handles built on them:
// *sqlx.Tx, GORM's Statement.ConnPool inside a transaction, bun.Tx's Tx
// field, ent's *sql.Tx.
type SQLQuerier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// SQL adapts a database/sql handle to the pgx types outboxkit's methods
// take: pass SQL(tx) wherever a DBTX or pgx.Tx is asked for, so the events
// (or the processed record) commit with the rest of tx.
//
//	tx, err := db.BeginTx(ctx, nil)
//	...
//	if _, err := tx.ExecContext(ctx, "UPDATE orders SET status = 'paid' WHERE id = $1", id); err != nil { ... }
//	if err := store.Add(ctx, postgres.SQL(tx), e); err != nil { ... }
//	err = tx.Commit()
//
// It works with lib/pq and with pgx's stdlib driver: arguments are sent
// in PostgreSQL's text format, which every driver passes through. Begin on
// the returned value opens a savepoint of q (Deduper.OnceTx and
// Sequencer.OnceInOrderTx use one), so q must be inside a transaction for
// those; Commit and Rollback commit or roll back q when it is a *sql.Tx
// (or anything with Commit and Rollback methods) and fail otherwise.
func SQL(q SQLQuerier) *SQLConn { return &SQLConn{q: q} }

// SQLConn is a database/sql handle seen as a pgx.Tx; SQL makes one.
type SQLConn struct {
	q SQLQuerier
	// savepoint names the savepoint this value stands for, "" for the
	// handle itself; savepoints counts the savepoints opened inside it.
	savepoint  string
	savepoints *atomic.Int64
	// owned: the transaction was begun by this package (sqlDB.Begin), and
	// Commit and Rollback end it.
	owned bool
	done  atomic.Bool
}

var _ pgx.Tx = (*SQLConn)(nil)

// Querier returns the database/sql handle c runs on: the *sql.Tx (or the
// value given to SQL) whose transaction its statements belong to.
func (c *SQLConn) Querier() SQLQuerier { return c.q }

// Exec implements DBTX.
func (c *SQLConn) Exec(ctx context.Context, query string, args ...any) (pgconn.CommandTag, error) {
	a, err := sqlArgs(args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	res, err := c.q.ExecContext(ctx, query, a...)
	if err != nil {
		return pgconn.CommandTag{}, sqlError(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	return pgconn.NewCommandTag("EXEC " + strconv.FormatInt(n, 10)), nil
}

// Query implements pgx.Tx.
func (c *SQLConn) Query(ctx context.Context, query string, args ...any) (pgx.Rows, error) {
	a, err := sqlArgs(args)
	if err != nil {
		return nil, err
	}
	rows, err := c.q.QueryContext(ctx, query, a...)
	if err != nil {
		return nil, sqlError(err)
	}
	return newSQLRows(rows), nil
}

// QueryRow implements pgx.Tx.
func (c *SQLConn) QueryRow(ctx context.Context, query string, args ...any) pgx.Row {
	rows, err := c.Query(ctx, query, args...)
	return sqlRow{rows: rows, err: err}
}

// Begin opens a savepoint: the returned value's Commit releases it and
// its Rollback rolls back to it.
func (c *SQLConn) Begin(ctx context.Context) (pgx.Tx, error) {
	if c.savepoints == nil {
		c.savepoints = new(atomic.Int64)
	}
	name := "outboxkit_sp_" + strconv.FormatInt(c.savepoints.Add(1), 10)
	if _, err := c.q.ExecContext(ctx, "SAVEPOINT "+name); err != nil {
		return nil, sqlError(err)
	}
	return &SQLConn{q: c.q, savepoint: name, savepoints: c.savepoints}, nil
}

// txEnder is what a database/sql transaction has to end it.
type txEnder interface {
	Commit() error
	Rollback() error
}

// Commit releases the savepoint c stands for, or commits c's transaction.
func (c *SQLConn) Commit(ctx context.Context) error {
	if c.done.Swap(true) {
		return pgx.ErrTxClosed
	}
	if c.savepoint != "" {
		_, err := c.q.ExecContext(ctx, "RELEASE SAVEPOINT "+c.savepoint)
		return sqlError(err)
	}
	t, ok := c.q.(txEnder)
	if !ok {
		return fmt.Errorf("outboxkit/postgres: commit: the database/sql handle (%T) is not a transaction", c.q)
	}
	return sqlError(t.Commit())
}

// Rollback rolls back to the savepoint c stands for, or rolls back c's
// transaction. After Commit it does nothing and returns pgx.ErrTxClosed,
// as pgx's transactions do, so it can be deferred.
func (c *SQLConn) Rollback(ctx context.Context) error {
	if c.done.Swap(true) {
		return pgx.ErrTxClosed
	}
	if c.savepoint != "" {
		_, err := c.q.ExecContext(ctx, "ROLLBACK TO SAVEPOINT "+c.savepoint)
		return sqlError(err)
	}
	t, ok := c.q.(txEnder)
	if !ok {
		return fmt.Errorf("outboxkit/postgres: rollback: the database/sql handle (%T) is not a transaction", c.q)
	}
	if err := t.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return sqlError(err)
	}
	return nil
}

// errSQLUnsupported is what the pgx-only parts of pgx.Tx return.
var errSQLUnsupported = errors.New("outboxkit/postgres: not available through database/sql")

// CopyFrom is not available through database/sql.
func (c *SQLConn) CopyFrom(context.Context, pgx.Identifier, []string, pgx.CopyFromSource) (int64, error) {
	return 0, errSQLUnsupported
}

// SendBatch runs the batch's statements one after the other in c.
func (c *SQLConn) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return &sqlBatch{ctx: ctx, c: c, queue: b.QueuedQueries}
}

// LargeObjects is not available through database/sql.
func (c *SQLConn) LargeObjects() pgx.LargeObjects { return pgx.LargeObjects{} }

// Prepare is not available through database/sql.
func (c *SQLConn) Prepare(context.Context, string, string) (*pgconn.StatementDescription, error) {
	return nil, errSQLUnsupported
}

// Conn returns nil: there is no pgx connection underneath.
func (c *SQLConn) Conn() *pgx.Conn { return nil }

// sqlDB is a *sql.DB behind the seam (conns): the handle of a Store,
// Deduper, Sequencer, Inbox or Migrator opened on database/sql.
type sqlDB struct {
	db *sql.DB
}

func (d *sqlDB) Exec(ctx context.Context, query string, args ...any) (pgconn.CommandTag, error) {
	return SQL(d.db).Exec(ctx, query, args...)
}

func (d *sqlDB) Query(ctx context.Context, query string, args ...any) (pgx.Rows, error) {
	return SQL(d.db).Query(ctx, query, args...)
}

func (d *sqlDB) QueryRow(ctx context.Context, query string, args ...any) pgx.Row {
	return SQL(d.db).QueryRow(ctx, query, args...)
}

// Begin begins a transaction whose Commit and Rollback end it.
func (d *sqlDB) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, sqlError(err)
	}
	return &SQLConn{q: tx, owned: true}, nil
}

// SendBatch runs the batch in a transaction of its own, as pgx runs one in
// an implicit transaction: a transaction-scoped lock taken by its first
// statement is held through the others (abandon.go relies on it).
func (d *sqlDB) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	tx, err := d.Begin(ctx)
	if err != nil {
		return &sqlBatch{err: err}
	}
	return &sqlBatch{ctx: ctx, c: tx.(*SQLConn), queue: b.QueuedQueries, commit: true}
}

// sqlBatch runs a pgx.Batch's statements one at a time: each Exec, Query
// or QueryRow runs the next one, Close runs what is left.
type sqlBatch struct {
	ctx    context.Context
	c      *SQLConn
	queue  []*pgx.QueuedQuery
	next   int
	err    error // the first failure: later statements are not run
	commit bool  // the batch owns c's transaction
	closed bool
}

func (b *sqlBatch) pop() (*pgx.QueuedQuery, error) {
	if b.err != nil {
		return nil, b.err
	}
	if b.next >= len(b.queue) {
		return nil, errors.New("outboxkit/postgres: no more statements in the batch")
	}
	q := b.queue[b.next]
	b.next++
	return q, nil
}

func (b *sqlBatch) Exec() (pgconn.CommandTag, error) {
	q, err := b.pop()
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := b.c.Exec(b.ctx, q.SQL, q.Arguments...)
	if err != nil {
		b.err = err
	}
	return tag, err
}

func (b *sqlBatch) Query() (pgx.Rows, error) {
	q, err := b.pop()
	if err != nil {
		return nil, err
	}
	rows, err := b.c.Query(b.ctx, q.SQL, q.Arguments...)
	if err != nil {
		b.err = err
	}
	return rows, err
}

func (b *sqlBatch) QueryRow() pgx.Row {
	rows, err := b.Query()
	return sqlRow{rows: rows, err: err}
}

func (b *sqlBatch) Close() error {
	if b.closed {
		return b.err
	}
	b.closed = true
	for b.err == nil && b.next < len(b.queue) {
		_, _ = b.Exec()
	}
	if !b.commit || b.c == nil {
		return b.err
	}
	if b.err != nil {
		_ = b.c.Rollback(context.WithoutCancel(b.ctx))
		return b.err
	}
	b.err = b.c.Commit(b.ctx)
	return b.err
}

// Tx returns nil: pgx.Batch.BeginTx is not used through database/sql.
func (b *sqlBatch) Tx() pgx.Tx { return nil }
