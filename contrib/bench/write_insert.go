package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// The write workload's comparison with the seed article's outbox (shared
// seeds/000): eight writers, each transaction one business INSERT (an order)
// plus one event, written by hand into the article's outbox table, through
// outboxkit's Store.Add with its defaults, or as a River job with InsertTx.
// The hand-written INSERT is the baseline of the targets: what the outbox
// costs a team that uses no library at all, with no NOTIFY and nothing
// consuming. The libraries are measured as they are deployed, with their
// consumer running (outboxkit's relay, River's workers), since a wake-up
// mechanism may cost the writers only while something listens; with
// -extras also without it, so the consumer's share shows.

// Cases of the comparison.
const (
	caseInsertEvent    = "INSERT + event"
	caseInsertConsumed = "INSERT + event, consumer running"
	caseInsertBare     = "INSERT + event, no consumer"
	caseInsertAlone    = "INSERT alone"
)

// eventWriter is who writes the event of an insert case.
type eventWriter int

const (
	eventNone      eventWriter = iota // the business INSERT alone
	eventHand                         // INSERT into the article's table
	eventOutboxkit                    // postgres.Store.Add, defaults
	eventRiver                        // River's InsertTx
)

// articleTable is the seed article's outbox table, in a schema of its own
// so that its name can stay the article's.
const articleTable = "outbox_events"

// articleSchema creates the seed article's outbox table, as the article
// writes it (columns and partial index of pending rows), in a new schema.
func (b *bench) articleSchema(ctx context.Context) (*schema, error) {
	s, err := b.createSchema(ctx)
	if err != nil {
		return nil, err
	}
	t := s.table(articleTable)
	_, err = b.admin.Exec(ctx, `CREATE TABLE `+t+` (
  id             uuid PRIMARY KEY,
  event_type     text NOT NULL,
  schema_version integer NOT NULL DEFAULT 1,
  payload        jsonb NOT NULL,
  created_at     timestamptz NOT NULL DEFAULT now(),
  published_at   timestamptz,
  attempts       integer NOT NULL DEFAULT 0,
  lease_token    uuid,
  lease_until    timestamptz,
  last_error     text
);
CREATE INDEX outbox_pending_idx ON `+t+` (created_at) WHERE published_at IS NULL;`)
	if err != nil {
		_ = s.drop()
		return nil, fmt.Errorf("create the article's outbox table: %w", err)
	}
	return s, nil
}

// ordersDDL is the business table the insert cases write one row of.
func ordersDDL(s *schema) string {
	return `CREATE TABLE ` + s.table("orders") + ` (
  id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  customer   integer NOT NULL,
  status     text NOT NULL,
  total      numeric(12, 2) NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);`
}

// insertCases are the measurements of the comparison.
func (b *bench) insertCases() []writeCase {
	cases := []writeCase{
		{name: caseInsertEvent, system: sysHand, insert: true, outbox: eventHand},
		{name: caseInsertConsumed, system: sysDefaults, insert: true, outbox: eventOutboxkit, consume: true},
	}
	if b.o.river {
		cases = append(cases, writeCase{name: caseInsertConsumed, system: sysRiverDefaults, insert: true, outbox: eventRiver, consume: true, river: riverDefaults()})
	}
	if b.o.extras {
		cases = append(cases,
			writeCase{name: caseInsertAlone, system: sysPgx, insert: true, outbox: eventNone},
			writeCase{name: caseInsertBare, system: sysDefaults, insert: true, outbox: eventOutboxkit})
		if b.o.river {
			cases = append(cases,
				writeCase{name: caseInsertBare, system: sysRiverDefaults, insert: true, outbox: eventRiver, river: riverDefaults()},
				writeCase{name: caseInsertConsumed, system: b.riverTunedSys(), insert: true, outbox: eventRiver, consume: true, river: b.riverTuned()})
		}
	}
	return cases
}

// writeInsert runs one insert case: writers goroutines for the write
// duration, each committing business transactions back to back, with the
// case's consumer running meanwhile.
func (b *bench) writeInsert(ctx context.Context, ws *writeSchemas, c writeCase, profile string) (writeResult, error) {
	pool, err := newPool(ctx, b.o.dsn, int32(b.o.writers))
	if err != nil {
		return writeResult{}, err
	}
	defer pool.Close()
	payload := []byte(benchPayload)
	add := func(context.Context, pgx.Tx) error { return nil }
	after := func() {}
	// stop ends the consumer and says how many events it handled.
	stop := func() (int64, error) { return 0, nil }
	switch c.outbox {
	case eventHand:
		ins := `INSERT INTO ` + ws.article.table(articleTable) + ` (id, event_type, payload) VALUES ($1, 'bench', $2)`
		add = func(ctx context.Context, tx pgx.Tx) error {
			// A UUID v7, as outboxkit's Add writes: a random v4 would
			// spread the primary key's inserts over the whole index and
			// flatter every library against the baseline.
			_, err := tx.Exec(ctx, ins, pgtype.UUID{Bytes: core.NewID(), Valid: true}, payload)
			return err
		}
	case eventOutboxkit:
		store, err := postgres.New(pool, &postgres.Config{Schema: ws.main.name})
		if err != nil {
			return writeResult{}, err
		}
		add = func(ctx context.Context, tx pgx.Tx) error {
			return store.Add(ctx, tx, core.Event{ID: core.NewID(), Type: "bench", Payload: payload})
		}
		after = store.Notify // a no-op unless the default is NotifyAfterCommit
		if c.consume {
			if stop, err = b.startDefaultRelay(ctx, ws.main); err != nil {
				return writeResult{}, err
			}
		}
	case eventRiver:
		rw, err := b.newRiverWriter(ctx, ws.river, c.river, c.consume)
		if err != nil {
			return writeResult{}, err
		}
		add, stop = rw.add, rw.close
	}
	insertOrder := `INSERT INTO ` + ws.main.table("orders") + ` (customer, status, total) VALUES ($1, 'confirmed', 99.95)`
	tx1 := func(ctx context.Context, rng *rand.Rand) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
		if _, err := tx.Exec(ctx, insertOrder, rng.IntN(accountRows)+1); err != nil {
			return err
		}
		if err := add(ctx, tx); err != nil {
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		after()
		return nil
	}
	stopProf := startProfile(profile)
	start := time.Now()
	tps, err := closedLoop(ctx, b.o.writers, b.o.writeFor, tx1)
	elapsed := time.Since(start)
	stopProf()
	n, stopErr := stop()
	if err == nil {
		err = stopErr
	}
	if err != nil {
		return writeResult{}, err
	}
	res := writeResult{tps: tps}
	if c.consume {
		res.consumed = float64(n) / elapsed.Seconds()
	}
	return res, nil
}

// startDefaultRelay starts core.Relay with its defaults over a
// postgres.Store with its defaults, publishing to a counting sink, and
// returns the function that stops it.
func (b *bench) startDefaultRelay(ctx context.Context, s *schema) (func() (int64, error), error) {
	pool, err := newPool(ctx, b.o.dsn, 3)
	if err != nil {
		return nil, err
	}
	store, err := postgres.New(pool, &postgres.Config{Schema: s.name})
	if err != nil {
		pool.Close()
		return nil, err
	}
	sink := &countSink{}
	relay, err := core.NewRelay(store, sink, &core.RelayConfig{})
	if err != nil {
		pool.Close()
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- relay.Run(rctx) }()
	return func() (int64, error) {
		cancel()
		err := <-runErr
		pool.Close()
		if errors.Is(err, context.Canceled) {
			err = nil
		}
		return sink.n.Load(), err
	}, nil
}
