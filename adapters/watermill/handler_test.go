package outboxwatermill_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5"

	outboxwatermill "github.com/outboxkit/outboxkit/adapters/watermill"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// TestHandlerAppliesInSequenceThroughARouter: a Watermill router whose
// handler is outboxwatermill.Handler over a postgres.Sequencer receives an
// aggregate's events in reverse order and one of them twice; the early
// ones are Nacked (sequence gaps) and delivered again, the repeat is
// acknowledged without effect, and the effects table ends up holding 1..n
// once each, in order.
func TestHandlerAppliesInSequenceThroughARouter(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pool := pgtest.Pool(t, 4)
	schema := pgtest.Schema(t, pool, "wmseq")
	if err := postgres.Migrate(ctx, pool, &postgres.MigrateConfig{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	effects := pgx.Identifier{schema, "effects"}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE TABLE `+effects+` (pos bigserial PRIMARY KEY, seq bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	seq, err := postgres.NewSequencer(pool, &postgres.SequencerConfig{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	var gaps, applied atomic.Int64
	h := postgres.Effect(func(ctx context.Context, tx pgx.Tx, e core.Event) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+effects+` (seq) VALUES ($1)`, e.Sequence)
		return err
	})

	pubsub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 16}, watermill.NopLogger{})
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	handle := outboxwatermill.Handler(h, seq, "shipping")
	router.AddNoPublisherHandler("orders", "orders", pubsub, func(msg *message.Message) error {
		err := handle(msg)
		switch {
		case errors.Is(err, core.ErrSequenceGap):
			gaps.Add(1)
		case err == nil:
			var count int
			if qerr := pool.QueryRow(ctx, `SELECT count(*) FROM `+effects).Scan(&count); qerr == nil && count == n && applied.CompareAndSwap(0, int64(count)) {
				close(done)
			}
		}
		return err
	})
	go func() { _ = router.Run(ctx) }()
	<-router.Running()
	defer router.Close()

	events := make([]core.Event, n)
	for i := range events {
		e, err := core.NewEvent("order.status", map[string]int{"step": i + 1})
		if err != nil {
			t.Fatal(err)
		}
		e.AggregateType, e.AggregateID, e.Sequence = "order", "42", int64(i+1)
		events[i] = e
	}
	// Newest first, and sequence 1 twice (a redelivery).
	order := []int{4, 3, 2, 1, 0, 0}
	for _, i := range order {
		msg, err := outboxwatermill.MessageFromEvent(events[i])
		if err != nil {
			t.Fatal(err)
		}
		if err := pubsub.Publish("orders", msg); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the router never applied every event")
	}
	rows, err := pool.Query(ctx, `SELECT seq FROM `+effects+` ORDER BY pos`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[1 2 3 4 5]" {
		t.Fatalf("effects applied in the order %v, want [1 2 3 4 5]", got)
	}
	if gaps.Load() == 0 {
		t.Fatal("no delivery arrived ahead of its predecessor: the test did not test ordering")
	}
}

// TestHandlerRefusesAMessageWithoutAnEvent: a message that carries no
// valid event can never apply, so the error is Permanent.
func TestHandlerRefusesAMessageWithoutAnEvent(t *testing.T) {
	t.Parallel()
	h := outboxwatermill.Handler(core.HandlerFunc(func(context.Context, core.Event) error { return nil }), nil, "shipping")
	err := h(message.NewMessage(watermill.NewUUID(), []byte("not json")))
	if err == nil || !core.IsPermanent(err) {
		t.Fatalf("err = %v, want a Permanent error", err)
	}
}
