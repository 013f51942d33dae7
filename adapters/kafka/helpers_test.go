package outboxkafka_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	outboxkafka "github.com/outboxkit/outboxkit/adapters/kafka"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/kafkatest"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

var topicSeq atomic.Int64

// newTopic returns a topic name no other test uses.
func newTopic(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano(), topicSeq.Add(1))
}

// newClient returns a relay's client on c, closed when t ends.
func newClient(t testing.TB, c *kafkatest.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := outboxkafka.NewClient(c.Seeds(), append([]kgo.Opt{kgo.AllowAutoTopicCreation()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// events decodes every record collected so far.
func events(t testing.TB, recs []*kgo.Record) []core.Event {
	t.Helper()
	out := make([]core.Event, 0, len(recs))
	for _, r := range recs {
		e, err := outboxkafka.EventFromRecord(r)
		if err != nil {
			t.Fatalf("record at %s/%d@%d is not an event: %v", r.Topic, r.Partition, r.Offset, err)
		}
		out = append(out, e)
	}
	return out
}

func waitCtx(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// newStore returns a migrated PostgreSQL outbox in a schema of its own.
func newStore(t testing.TB, ordering bool) (*pgxpool.Pool, *postgres.Store) {
	t.Helper()
	pool := pgtest.Pool(t, 8)
	schema := pgtest.Schema(t, pool, "kafka")
	if err := postgres.Migrate(context.Background(), pool, &postgres.MigrateConfig{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	store, err := postgres.New(pool, &postgres.Config{Schema: schema, Ordering: ordering})
	if err != nil {
		t.Fatal(err)
	}
	return pool, store
}

// write commits n events per aggregate, one transaction per round of
// aggregates, so each aggregate's events get sequences 1..n in order.
func write(t testing.TB, pool *pgxpool.Pool, store *postgres.Store, aggregates, n int) []core.Event {
	t.Helper()
	ctx := context.Background()
	var all []core.Event
	for seq := range n {
		batch := make([]core.Event, 0, aggregates)
		for a := range aggregates {
			e, err := core.NewEvent("order.changed", json.RawMessage(fmt.Sprintf(`{"agg":%d,"n":%d}`, a, seq+1)))
			if err != nil {
				t.Fatal(err)
			}
			e.AggregateType, e.AggregateID = "order", fmt.Sprintf("order-%03d", a)
			e.Headers = map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tenant": "acme"}
			batch = append(batch, e)
		}
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return store.Add(ctx, tx, batch...) }); err != nil {
			t.Fatal(err)
		}
		all = append(all, batch...)
	}
	return all
}

// runRelay runs a relay until t ends.
func runRelay(t testing.TB, store core.Store, pub core.Publisher, cfg *core.RelayConfig) {
	t.Helper()
	relay, err := core.NewRelay(store, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Errorf("relay: %v", err)
		}
	})
}

// drained waits until the store has nothing pending or leased.
func drained(t testing.TB, store *postgres.Store, d time.Duration) core.Stats {
	t.Helper()
	ctx := waitCtx(t, d)
	for {
		st, err := store.Stats(ctx)
		if err == nil && st.Pending == 0 && st.Leased == 0 {
			return st
		}
		select {
		case <-ctx.Done():
			t.Fatalf("outbox not drained: %+v (%v)", st, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
