package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outboxkit/core"
)

// Deduper implements core.Deduper on PostgreSQL: it records (consumer, event
// ID) in <Table>_processed in the same transaction as the effect, which it
// hands to the effect through the context (TxFromContext).
type Deduper struct {
	db       conns
	cfg      DeduperConfig
	n        names
	insert   string
	pruneSQL string
}

var _ core.Deduper = (*Deduper)(nil)

// NewDeduper returns a Deduper on db, a *pgxpool.Pool or a *sql.DB
// (Handle); cfg may be nil for the defaults. It performs no I/O: run
// Migrate for the same schema and table first.
//
// On a *sql.DB, Once runs the effect in a database/sql transaction:
// SQLEffect and SQLTxFromContext hand it to the effect as a *sql.Tx.
func NewDeduper[DB Handle](db DB, cfg *DeduperConfig) (*Deduper, error) {
	h, _, err := openHandle(db, "db")
	if err != nil {
		return nil, err
	}
	return newDeduper(h, cfg)
}

func newDeduper(h conns, cfg *DeduperConfig) (*Deduper, error) {
	var c DeduperConfig
	if cfg != nil {
		c = *cfg
	}
	c = c.WithDefaults()
	n, err := c.validate()
	if err != nil {
		return nil, err
	}
	return &Deduper{
		db: h, cfg: c, n: n,
		insert: `INSERT INTO ` + n.processed + ` (consumer, event_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
		pruneSQL: `DELETE FROM ` + n.processed + ` t USING (
SELECT consumer, event_id FROM ` + n.processed + ` WHERE processed_at < $1 ORDER BY processed_at LIMIT $2 FOR UPDATE SKIP LOCKED
) v WHERE t.consumer = v.consumer AND t.event_id = v.event_id`,
	}, nil
}

// Once implements core.Deduper. It begins a transaction, inserts the key
// (doing nothing if it is there), runs effect only when the key is new, and
// commits. effect must write through the transaction TxFromContext returns to
// be atomic with the record; if it fails, the transaction rolls back, nothing
// is recorded, and Once returns the effect's error unchanged (so
// core.Permanent marks survive).
//
// Concurrent calls with one key serialise on the key's unique index: the
// others wait for the first transaction and then find the key recorded (or,
// if it rolled back, one of them runs the effect).
func (d *Deduper) Once(ctx context.Context, key core.DedupeKey, effect func(ctx context.Context) error) (applied bool, err error) {
	if err := checkKey(key); err != nil {
		return false, err
	}
	tx, err := d.db.Begin(ctx)
	if err != nil {
		return false, wrap("deduper: begin", err)
	}
	defer func() {
		if !applied {
			// Rolling back must happen even when ctx is done.
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	tag, err := tx.Exec(ctx, d.insert, key.Consumer, pgtype.UUID{Bytes: key.EventID, Valid: true})
	if err != nil {
		return false, wrap("deduper: record event", err)
	}
	if tag.RowsAffected() == 0 {
		return false, nil // already applied
	}
	if err := effect(context.WithValue(ctx, txKey{}, tx)); err != nil {
		return false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return false, wrap("deduper: commit", err)
	}
	return true, nil
}

// OnceTx is Once within a transaction the caller already holds, for
// consumers that apply an effect as part of a larger unit of work. It runs
// in a savepoint of tx: it records key, runs effect (which receives the
// savepoint through TxFromContext and through ctx only), and releases the
// savepoint. A duplicate key or a failed effect rolls back to the savepoint,
// so tx stays usable either way: the caller may go on and commit its other
// work.
//
// Nothing is durable until the caller commits tx: applied reports that the
// effect ran and its record is written in tx. If the caller rolls back, the
// effect and its record go together, and a later delivery applies it again.
// A concurrent delivery of the same key waits on the record's unique index
// until tx ends.
func (d *Deduper) OnceTx(ctx context.Context, tx pgx.Tx, key core.DedupeKey, effect func(ctx context.Context) error) (applied bool, err error) {
	if err := checkKey(key); err != nil {
		return false, err
	}
	if tx == nil {
		return false, &core.ConfigError{Field: "tx", Reason: "is nil: pass the transaction to join, or call Once"}
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return false, wrap("deduper: savepoint", err)
	}
	defer func() {
		if !applied {
			_ = sp.Rollback(context.WithoutCancel(ctx))
		}
	}()
	tag, err := sp.Exec(ctx, d.insert, key.Consumer, pgtype.UUID{Bytes: key.EventID, Valid: true})
	if err != nil {
		return false, wrap("deduper: record event", err)
	}
	if tag.RowsAffected() == 0 {
		return false, nil
	}
	if err := effect(context.WithValue(ctx, txKey{}, sp)); err != nil {
		return false, err
	}
	if err := sp.Commit(ctx); err != nil {
		return false, wrap("deduper: release savepoint", err)
	}
	return true, nil
}

func checkKey(key core.DedupeKey) error {
	if key.Consumer == "" {
		return &core.ConfigError{Field: "DedupeKey.Consumer", Reason: "is empty: name the consumer (one stable name per effect)"}
	}
	if key.EventID.IsZero() {
		return &core.ValidationError{Field: "ID", Reason: "is the nil UUID", Err: core.ErrInvalidID}
	}
	return nil
}

// Prune deletes processed-event records older than processedBefore, in
// statements of at most PruneBatchSize rows, and returns how many it
// deleted. Keep records for longer than any transport may redeliver (QStash
// retries for days, replays for as long as you keep published events).
func (d *Deduper) Prune(ctx context.Context, processedBefore time.Time) (int64, error) {
	if processedBefore.IsZero() {
		return 0, fmt.Errorf("outboxkit/postgres: deduper prune: processedBefore is zero")
	}
	var total int64
	for {
		tag, err := d.db.Exec(ctx, d.pruneSQL, processedBefore, d.cfg.PruneBatchSize)
		if err != nil {
			return total, wrap("deduper prune", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(d.cfg.PruneBatchSize) {
			return total, nil
		}
	}
}

type txKey struct{}

// TxFromContext returns the transaction a Deduper or Sequencer runs an
// effect in (with OnceTx and OnceInOrderTx, a savepoint of the caller's
// transaction). Effects write their changes through it so the changes and
// the processed record commit together.
func TxFromContext(ctx context.Context) (pgx.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(pgx.Tx)
	return tx, ok
}

// Effect adapts a function that writes through the Deduper's transaction to a
// core.Handler. Run the handler through the Deduper (core.Idempotent,
// core.ApplyOnce); called any other way it fails with ErrNoTx instead of
// writing outside the transaction.
func Effect(fn func(ctx context.Context, tx pgx.Tx, e core.Event) error) core.Handler {
	return core.HandlerFunc(func(ctx context.Context, e core.Event) error {
		tx, ok := TxFromContext(ctx)
		if !ok {
			return fmt.Errorf("event %s (%s): %w", e.ID, e.Type, ErrNoTx)
		}
		return fn(ctx, tx, e)
	})
}
