package chaos_test

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outboxkit/core"
)

// Kinds of orders the producer writes, stored in orders.kind.
const (
	kindOK      = "ok"      // order.placed: the consumer applies it once
	kindUnknown = "unknown" // a type no handler knows: QStash dead-letters it
)

// producer writes one order and its event per tick, each in its own
// transaction, as a service would. Some transactions roll back on purpose;
// their events must never be published. A transaction that fails (the
// database restarting) is not retried: the orders table tells afterwards
// whether it committed.
type producer struct {
	e             *env
	rate          int // transactions per second
	unknownEvery  int // every n-th event has an unknown type (0: none)
	rollbackEvery int // every n-th transaction rolls back (0: none)
	aggregates    int // events spread over this many aggregates (0: none)

	mu            sync.Mutex
	attempted     int
	failed        int
	rolledBackIDs []core.ID
}

func (p *producer) run(ctx context.Context) {
	tick := time.NewTicker(time.Second / time.Duration(p.rate))
	defer tick.Stop()
	for i := 1; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		p.write(ctx, i)
	}
}

func (p *producer) write(ctx context.Context, i int) {
	typ, kind := "order.placed", kindOK
	if p.unknownEvery > 0 && i%p.unknownEvery == 0 {
		typ, kind = "chaos.unknown", kindUnknown
	}
	e, err := core.NewEvent(typ, map[string]int{"order": i})
	if err != nil {
		panic(err)
	}
	e.Source = "chaos/producer"
	if p.aggregates > 0 {
		e.AggregateType, e.AggregateID = "order", "a"+itoa(i%p.aggregates)
	}
	rollback := p.rollbackEvery > 0 && i%p.rollbackEvery == 0

	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err = func() error {
		tx, err := p.e.writes.Begin(tctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(tctx) //nolint:errcheck // a no-op after Commit
		if _, err := tx.Exec(tctx, `INSERT INTO `+p.e.table("orders")+` (event_id, kind) VALUES ($1, $2)`, e.ID.String(), kind); err != nil {
			return err
		}
		if err := p.e.store.Add(tctx, tx, e); err != nil {
			return err
		}
		if rollback {
			return tx.Rollback(tctx)
		}
		return tx.Commit(tctx)
	}()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.attempted++
	switch {
	case err != nil:
		p.failed++
	case rollback:
		p.rolledBackIDs = append(p.rolledBackIDs, e.ID)
	}
}

func (p *producer) rolledBack() []core.ID {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]core.ID(nil), p.rolledBackIDs...)
}

func (p *producer) counts() (attempted, failed int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.attempted, p.failed
}

// addEvents writes events in one transaction.
func (e *env) addEvents(ctx context.Context, kind string, events ...core.Event) error {
	return pgx.BeginFunc(ctx, e.writes, func(tx pgx.Tx) error {
		for _, ev := range events {
			if _, err := tx.Exec(ctx, `INSERT INTO `+e.table("orders")+` (event_id, kind) VALUES ($1, $2)`, ev.ID.String(), kind); err != nil {
				return err
			}
		}
		return e.store.Add(ctx, tx, events...)
	})
}

func itoa(i int) string {
	const digits = "0123456789"
	if i == 0 {
		return "0"
	}
	var b [20]byte
	n := len(b)
	for ; i > 0; i /= 10 {
		n--
		b[n] = digits[i%10]
	}
	return string(b[n:])
}
