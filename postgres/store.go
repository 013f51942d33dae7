package postgres

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
)

// DBTX is what Add needs from the caller: something that can execute one
// statement. pgx.Tx, *pgx.Conn, *pgxpool.Pool and *pgxpool.Conn all satisfy
// it, and so does SQL(tx) for a database/sql transaction. Pass the
// transaction that writes your business rows, so the events commit (or
// roll back) with them.
type DBTX interface {
	Exec(ctx context.Context, sql string, arguments ...any) (pgconn.CommandTag, error)
}

// Store is the PostgreSQL outbox. Writers call Add inside their own
// transactions (and, with NotifyAfterCommit, Notify after committing them);
// relays use it as a core.Store through Claim and Settle, and
// discover its optional capabilities (core.Notifier, core.StatsReader,
// core.Replayer, core.Pruner, core.SettleClaimer, core.Checker) by type
// assertion. Operators have Get,
// DeadLetters and Purge.
//
// A Store is safe for concurrent use, and any number of Stores in any number
// of processes may share one table.
type Store struct {
	// db runs the store's own statements; pool is the same handle when it
	// is a pgx pool, nil for a *sql.DB (handle.go).
	db   conns
	pool *pgxpool.Pool
	cfg  Config
	n    names

	// SQL texts, built once from the validated names.
	addSQL, addOrderedSQL, addOneSQL, addOneOrderedSQL, claimSQL, claimDestSQL, settleSQL, publishSQL, pruneSQL, statsSQL string
	// With Config.DeletePublished, settling a published event deletes it.
	deleteSQL, settleDeleteSQL string
	// The same settlements finding rows by the addresses Claim returned.
	byTID tidSQL
	// claimSlotSQL is the claim of one slot (Claim explains when).
	claimSlotSQL string
	// releaseSQL gives back what a failed claim leased (abandon.go).
	releaseSQL string
	// part holds the same statements for the partitioned layout, and
	// layout is the table's as the store last saw it (layout.go);
	// partNow is part as the current period runs them (createdfloor.go).
	part    partSQL
	partNow atomic.Pointer[periodSQL]
	layout  atomic.Int32
	// backlog is whether the last claim through this store came back
	// full: the next one then claims by slot.
	backlog atomic.Bool
	// plans and grown decide whether the relay's statements are prepared
	// or planned per execution (plans.go).
	plans planMode
	grown atomic.Bool
	// partYoung: the current period's partition has no statistics yet
	// (createdfloor.go), so the relay's statements are planned per
	// execution.
	partYoung atomic.Bool
	// plannedRows replaces plannedRows when set (tests).
	plannedRows *int

	// notifier sends Notify's after-commit wake-ups.
	notifier afterCommit

	// wakeups holds what Listen's connections share (wakeup.go).
	wakeups *wakeupState
}

// tidSQL holds the settle statements that find rows by address (rowsByTID).
type tidSQL struct{ settle, publish, delete, settleDelete string }

// partSQL is the relay's statements on the partitioned layout
// (claimPartitioned, createdWithin, byIDPart).
type partSQL struct {
	claim, claimDest, claimSlot                  string
	settle, publish, delete, settleDelete, prune string
	byTID                                        tidSQL
}

// Interface checks: the capabilities the relay and operators look for.
var (
	_ core.Store         = (*Store)(nil)
	_ core.Notifier      = (*Store)(nil)
	_ core.StatsReader   = (*Store)(nil)
	_ core.Replayer      = (*Store)(nil)
	_ core.Pruner        = (*Store)(nil)
	_ core.SettleClaimer = (*Store)(nil)
	_ core.Checker       = (*Store)(nil)
)

// New returns a Store on db, a *pgxpool.Pool or a *sql.DB (Handle), which
// serves the relay side (claims, settlements, the listener's
// configuration). cfg may be nil for the defaults. New validates the
// configuration and performs no I/O: run Migrate once before using the
// store, or every call fails with ErrNotMigrated.
//
// Writers may use any driver whatever the store's handle: Add takes a pgx
// transaction, or a database/sql one through SQL.
func New[DB Handle](db DB, cfg *Config) (*Store, error) {
	h, pool, err := openHandle(db, "db")
	if err != nil {
		return nil, err
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c = c.WithDefaults()
	n, err := c.validate()
	if err != nil {
		return nil, err
	}
	wk, err := newWakeupState(pool, c)
	if err != nil {
		return nil, err
	}
	notify := c.Notify == NotifyInTransaction
	return &Store{
		wakeups:          wk,
		db:               h,
		pool:             pool,
		cfg:              c,
		n:                n,
		addSQL:           addSQL(n, notify),
		addOrderedSQL:    addOrderedSQL(n, notify),
		addOneSQL:        addOneSQL(n, notify),
		addOneOrderedSQL: addOneOrderedSQL(n, notify),
		claimSQL:         claimSQL(n, c.Ordering, false),
		claimDestSQL:     claimSQL(n, c.Ordering, true),
		claimSlotSQL:     claimSlotSQL(n),
		releaseSQL:       releaseSQL(n),
		settleSQL:        settleSQL(n),
		publishSQL:       publishSQL(n),
		deleteSQL:        deleteSQL(n),
		settleDeleteSQL:  settleDeleteSQL(n),
		byTID:            tidSQL{settleTIDSQL(n), publishTIDSQL(n), deleteTIDSQL(n), settleDeleteTIDSQL(n)},
		pruneSQL:         pruneSQL(n),
		statsSQL:         statsSQL(n),
		plans:            newPlanMode(pool),
		part: partSQL{
			claim: claimPartSQL(n, c.Ordering, false), claimDest: claimPartSQL(n, c.Ordering, true), claimSlot: claimSlotPartSQL(n),
			settle: settlePartSQL(n), publish: publishPartSQL(n), delete: deletePartSQL(n), settleDelete: settleDeletePartSQL(n),
			prune: prunePartSQL(n),
			byTID: tidSQL{settleTIDPartSQL(n), publishTIDPartSQL(n), deleteTIDPartSQL(n), settleDeleteTIDPartSQL(n)},
		},
	}, nil
}

// Config returns the store's configuration with defaults applied.
func (s *Store) Config() Config { return s.cfg }

// wrap prefixes a failed operation and translates the driver's error.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return &opError{op: op, err: interpretError(err)}
}

// opError names the failed operation while keeping the cause's chain
// (sentinels and *pgconn.PgError) reachable.
type opError struct {
	op  string
	err error
}

func (e *opError) Error() string { return "outboxkit/postgres: " + e.op + ": " + e.err.Error() }
func (e *opError) Unwrap() error { return e.err }
