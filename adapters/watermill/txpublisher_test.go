package outboxwatermill_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	_ "github.com/lib/pq"              // database/sql driver "postgres"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outboxkit/adapters/memory"
	outboxwatermill "github.com/outboxkit/outboxkit/adapters/watermill"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/wmtest"
	"github.com/outboxkit/outboxkit/postgres"
	"github.com/outboxkit/outboxkit/tracing"
)

func newMemoryTxPublisher(t *testing.T, cfg *outboxwatermill.TxPublisherConfig) (*outboxwatermill.TxPublisher, *memory.Store) {
	t.Helper()
	store := memory.NewStore(nil)
	pub, err := outboxwatermill.NewTxPublisher(memoryAdder(store), struct{}{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return pub, store
}

func TestTxPublisherMapsMessageToEvent(t *testing.T) {
	t.Parallel()
	pub, store := newMemoryTxPublisher(t, &outboxwatermill.TxPublisherConfig{Source: "billing"})
	id := core.NewID()
	msg := message.NewMessage(id.String(), []byte(`{"amount":5}`))
	msg.Metadata.Set("ce-type", "invoice.paid")
	msg.Metadata.Set("ce-subject", "inv-9")
	msg.Metadata.Set("ce-aggregatetype", "invoice")
	msg.Metadata.Set("ce-schemaversion", "2")
	msg.Metadata.Set("traceparent", wmtest.Traceparent)
	msg.Metadata.Set("correlation_id", "c-1")
	msg.Metadata.Set("ce-x-tenant", "acme")             // consumed from an outbox and published on
	msg.Metadata.Set("ce-time", "2001-01-01T00:00:00Z") // the store's to assign
	if err := pub.Publish("invoices", msg); err != nil {
		t.Fatal(err)
	}
	st, ok := store.Get(id)
	if !ok {
		t.Fatalf("event %s not in the outbox: the event ID must be the message UUID", id)
	}
	e := st.Event
	if e.Type != "invoice.paid" || e.Destination != "invoices" || e.Source != "billing" || e.AggregateID != "inv-9" ||
		e.AggregateType != "invoice" || e.SchemaVersion != 2 || string(e.Payload) != `{"amount":5}` {
		t.Errorf("event = %+v", e)
	}
	want := map[string]string{"traceparent": wmtest.Traceparent, "correlation_id": "c-1", "tenant": "acme"}
	if len(e.Headers) != len(want) {
		t.Errorf("headers = %v, want %v", e.Headers, want)
	}
	for k, v := range want {
		if e.Headers[k] != v {
			t.Errorf("header %s = %q, want %q", k, e.Headers[k], v)
		}
	}
	if e.CreatedAt.Year() == 2001 {
		t.Error("ce-time metadata became CreatedAt; the store must stamp new rows itself")
	}
}

func TestTxPublisherTypeDefaultsToTopicAndCanBeChosen(t *testing.T) {
	t.Parallel()
	pub, store := newMemoryTxPublisher(t, nil)
	msg := message.NewMessage(core.NewID().String(), []byte(`{}`))
	if err := pub.Publish("user.signed_up", msg); err != nil {
		t.Fatal(err)
	}
	if st, _ := store.Get(core.MustParseID(msg.UUID)); st.Event.Type != "user.signed_up" {
		t.Errorf("type = %q, want the topic", st.Event.Type)
	}

	pub, store = newMemoryTxPublisher(t, &outboxwatermill.TxPublisherConfig{
		EventType: func(topic string, m *message.Message) string { return topic + "/" + m.Metadata.Get("kind") },
	})
	msg = message.NewMessage(core.NewID().String(), []byte(`{}`))
	msg.Metadata.Set("kind", "created")
	if err := pub.Publish("users", msg); err != nil {
		t.Fatal(err)
	}
	if st, _ := store.Get(core.MustParseID(msg.UUID)); st.Event.Type != "users/created" {
		t.Errorf("type = %q, want users/created", st.Event.Type)
	}
}

func TestTxPublisherGivesNonUUIDMessagesAV7ID(t *testing.T) {
	t.Parallel()
	store := memory.NewStore(nil)
	pub, err := outboxwatermill.NewTxPublisher(memoryAdder(store), struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := outboxwatermill.NewOutboxSubscriber(store, fastSubscriber())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	msg := message.NewMessage("01J9ZQ3V5K8M2N4P6R8T0V2X4Z", []byte(`{}`)) // a ULID
	if err := pub.Publish("ulids", msg); err != nil {
		t.Fatal(err)
	}
	ch, err := sub.Subscribe(context.Background(), "ulids")
	if err != nil {
		t.Fatal(err)
	}
	got := wmtest.Receive(t, ch, 5*time.Second)
	got.Ack()
	if got.UUID != msg.UUID {
		t.Errorf("consumer sees UUID %q, want the published %q", got.UUID, msg.UUID)
	}
	id, err := core.ParseID(got.Metadata.Get("ce-id"))
	if err != nil || id.Time().IsZero() {
		t.Errorf("ce-id %q is not a UUID v7 (%v)", got.Metadata.Get("ce-id"), err)
	}
}

func TestTxPublisherRefusesNonJSONUnlessWrapping(t *testing.T) {
	t.Parallel()
	pub, store := newMemoryTxPublisher(t, nil)
	good := message.NewMessage(core.NewID().String(), []byte(`{}`))
	bad := message.NewMessage(core.NewID().String(), []byte(`not json`))
	err := pub.Publish("t", good, bad)
	if !errors.Is(err, outboxwatermill.ErrNonJSONPayload) || !errors.Is(err, core.ErrInvalidEvent) {
		t.Fatalf("err = %v, want ErrNonJSONPayload and core.ErrInvalidEvent", err)
	}
	if _, found := store.Get(core.MustParseID(good.UUID)); found {
		t.Fatal("a refused Publish wrote part of its messages; it must write all or none")
	}

	pub, store = newMemoryTxPublisher(t, &outboxwatermill.TxPublisherConfig{WrapNonJSON: true})
	if err := pub.Publish("t", bad); err != nil {
		t.Fatal(err)
	}
	st, _ := store.Get(core.MustParseID(bad.UUID))
	if string(st.Event.Payload) != `"bm90IGpzb24="` || st.Event.Headers[outboxwatermill.HeaderPayloadEncoding] != "base64" {
		t.Fatalf("wrapped payload %s, headers %v", st.Event.Payload, st.Event.Headers)
	}
	back, err := outboxwatermill.MessageFromEvent(st.Event)
	if err != nil || string(back.Payload) != "not json" {
		t.Fatalf("unwrapped payload %q (%v), want the original bytes", back.Payload, err)
	}
}

func TestTxPublisherInjectsTraceOfMessageContext(t *testing.T) {
	t.Parallel()
	pub, store := newMemoryTxPublisher(t, &outboxwatermill.TxPublisherConfig{
		BeforeAdd: tracing.NewInjector(tracing.WithPropagators(propagation.TraceContext{})),
	})
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled,
	}))
	msg := message.NewMessage(core.NewID().String(), []byte(`{}`))
	msg.Metadata.Set("traceparent", wmtest.Traceparent) // stale: the context wins
	msg.SetContext(ctx)
	if err := pub.Publish("t", msg); err != nil {
		t.Fatal(err)
	}
	st, _ := store.Get(core.MustParseID(msg.UUID))
	if got, want := st.Event.Headers["traceparent"], "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"; got != want {
		t.Fatalf("traceparent = %q, want %q from the message context", got, want)
	}
}

func TestTxPublisherClosed(t *testing.T) {
	t.Parallel()
	pub, _ := newMemoryTxPublisher(t, nil)
	if err := pub.Close(); err != nil {
		t.Fatal(err)
	}
	err := pub.Publish("t", message.NewMessage(core.NewID().String(), []byte(`{}`)))
	if !errors.Is(err, outboxwatermill.ErrClosed) {
		t.Fatalf("err = %v, want ErrClosed", err)
	}
}

// TestTxPublisherJoinsTheTransaction is the point of TxPublisher: messages
// commit and roll back with the caller's transaction.
func TestTxPublisherJoinsTheTransaction(t *testing.T) {
	t.Parallel()
	pool, store := newPostgresStore(t, 4)
	ctx := context.Background()
	publishIn := func(commit bool) core.ID {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
		pub, err := outboxwatermill.NewTxPublisher[postgres.DBTX](store, tx, nil)
		if err != nil {
			t.Fatal(err)
		}
		msg := message.NewMessageWithContext(ctx, core.NewID().String(), []byte(`{"n":1}`))
		if err := pub.Publish("orders", msg); err != nil {
			t.Fatal(err)
		}
		if commit {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return core.MustParseID(msg.UUID)
	}
	rolledBack := publishIn(false)
	committed := publishIn(true)
	if _, err := store.Get(ctx, rolledBack); !errors.Is(err, postgres.ErrNotFound) {
		t.Errorf("rolled-back message: Get err = %v, want ErrNotFound", err)
	}
	rec, err := store.Get(ctx, committed)
	if err != nil {
		t.Fatalf("committed message not in the outbox: %v", err)
	}
	if rec.Destination != "orders" || rec.Type != "orders" || rec.State != postgres.StatePending {
		t.Errorf("record = %+v", rec)
	}
}

func TestNewTxPublisherValidates(t *testing.T) {
	t.Parallel()
	if _, err := outboxwatermill.NewTxPublisher[postgres.DBTX](nil, nil, nil); !errors.Is(err, core.ErrInvalidConfig) {
		t.Errorf("nil adder: err = %v", err)
	}
	_, store := newMemoryTxPublisher(t, nil)
	var tx postgres.DBTX
	adder := outboxwatermill.AdderFunc[postgres.DBTX](func(ctx context.Context, _ postgres.DBTX, events ...core.Event) error {
		return store.Add(ctx, events...)
	})
	if _, err := outboxwatermill.NewTxPublisher(adder, tx, nil); !errors.Is(err, core.ErrInvalidConfig) {
		t.Errorf("nil tx: err = %v", err)
	}
}

// The same through database/sql, with both drivers: the publisher joins a
// *sql.Tx given as postgres.SQL(tx).
func TestTxPublisherJoinsSQLTransaction(t *testing.T) {
	t.Parallel()
	pool, store := newPostgresStore(t, 4)
	ctx := context.Background()
	for _, driver := range []string{"postgres" /* lib/pq */, "pgx" /* pgx's stdlib */} {
		t.Run(driver, func(t *testing.T) {
			db, err := sql.Open(driver, pool.Config().ConnString())
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			publishIn := func(commit bool) core.ID {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback() //nolint:errcheck // a no-op after Commit
				pub, err := outboxwatermill.NewTxPublisher[postgres.DBTX](store, postgres.SQL(tx), nil)
				if err != nil {
					t.Fatal(err)
				}
				a := message.NewMessageWithContext(ctx, core.NewID().String(), []byte(`{"n":1}`))
				b := message.NewMessageWithContext(ctx, core.NewID().String(), []byte(`{"n":2}`))
				if err := pub.Publish("orders", a, b); err != nil {
					t.Fatal(err)
				}
				if commit {
					if err := tx.Commit(); err != nil {
						t.Fatal(err)
					}
				}
				return core.MustParseID(b.UUID)
			}
			rolledBack := publishIn(false)
			committed := publishIn(true)
			if _, err := store.Get(ctx, rolledBack); !errors.Is(err, postgres.ErrNotFound) {
				t.Errorf("rolled-back message: Get err = %v, want ErrNotFound", err)
			}
			if rec, err := store.Get(ctx, committed); err != nil || rec.Destination != "orders" {
				t.Fatalf("committed message: %+v, %v", rec, err)
			}
		})
	}
}
