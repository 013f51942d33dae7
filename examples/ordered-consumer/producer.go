package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// producer is the order service: each status change updates its orders
// table and adds the status event in one transaction.
type producer struct {
	pool   *pgxpool.Pool
	store  *postgres.Store
	orders string // the producer's table, quoted

	mu  sync.Mutex
	ids map[int64][]core.ID // order → its events' IDs, by step
}

func newProducer(pool *pgxpool.Pool, store *postgres.Store, schema string) *producer {
	return &producer{pool: pool, store: store, orders: pgx.Identifier{schema, "orders"}.Sanitize(), ids: map[int64][]core.ID{}}
}

// advance moves order id to step (an index into statuses).
func (p *producer) advance(ctx context.Context, step int, id int64) error {
	e, err := core.NewEvent(statuses[step].eventType, statusPayload(step, id))
	if err != nil {
		return err
	}
	// With ordering on, Add gives the event its aggregate's next sequence.
	e.Source, e.AggregateType, e.AggregateID = "ordered-consumer/orders", "order", strconv.FormatInt(id, 10)
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		sql := "UPDATE " + p.orders + " SET status = $2 WHERE id = $1"
		if step == 0 {
			sql = "INSERT INTO " + p.orders + " (id, status) VALUES ($1, $2)"
		}
		if _, err := tx.Exec(ctx, sql, id, statuses[step].status); err != nil {
			return err
		}
		return p.store.Add(ctx, tx, e)
	})
	if err != nil {
		return fmt.Errorf("order %d → %s: %w", id, statuses[step].status, err)
	}
	p.mu.Lock()
	p.ids[id] = append(p.ids[id], e.ID)
	p.mu.Unlock()
	return nil
}

// writeAll moves every order through its four steps, the steps of one
// order right after each other, with writers orders at once: a busy shop,
// where an order's next event is often written before QStash has delivered
// the one before.
func (p *producer) writeAll(ctx context.Context, orders, writers int) error {
	ids := make(chan int64)
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range ids {
				for step := range statuses {
					if err := p.advance(ctx, step, id); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	var err error
feed:
	for id := int64(1); id <= int64(orders); id++ {
		select {
		case ids <- id:
		case err = <-errs:
			break feed
		}
	}
	close(ids)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errs:
		default:
		}
	}
	return err
}

// eventIDs returns the IDs of step's events of the first n orders.
func (p *producer) eventIDs(step, n int) []core.ID {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ids []core.ID
	for id := int64(1); id <= int64(n); id++ {
		if evs := p.ids[id]; step < len(evs) {
			ids = append(ids, evs[step])
		}
	}
	return ids
}
