package chaos_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core"
)

func TestBadInputProbe(t *testing.T) {
	e := newEnv(t, envConfig{})
	e.startConsumer()
	ctx := context.Background()
	healthy := orderEvents(t, 50, "order.placed", "")
	if err := e.addEvents(ctx, kindOK, healthy[:25]...); err != nil {
		t.Fatal(err)
	}
	unknown := orderEvents(t, 1, "chaos.unknown", "")[0]
	panics := orderEvents(t, 1, "chaos.panic", "")[0]
	if err := e.addEvents(ctx, "bad", unknown, panics); err != nil {
		t.Fatal(err)
	}
	sql := map[string]string{
		"empty type": `INSERT INTO OUTBOX (id, event_type, payload) VALUES ('%s', '', '{}')`,
	}
	_ = sql
	rows := []struct{ name, id, typ, payload string }{
		{"empty type", core.NewID().String(), "", `{}`},
		{"nil id", "00000000-0000-0000-0000-000000000000", "order.placed", `{}`},
		{"huge payload", core.NewID().String(), "order.placed", `"` + strings.Repeat("x", 1536<<10) + `"`},
		{"newline type", core.NewID().String(), "order\nplaced", `{}`},
		{"long type", core.NewID().String(), strings.Repeat("t", 300), `{}`},
	}
	for _, r := range rows {
		if _, err := e.pool.Exec(ctx, `INSERT INTO `+e.table("orders")+` (event_id, kind) VALUES ($1, 'bad')`, r.id); err != nil {
			t.Fatal(err)
		}
		if _, err := e.pool.Exec(ctx, `INSERT INTO `+e.table("outbox_events")+` (id, event_type, payload) VALUES ($1, $2, $3)`, r.id, r.typ, r.payload); err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
	}
	if err := e.addEvents(ctx, kindOK, healthy[25:]...); err != nil {
		t.Fatal(err)
	}
	e.startRelay(0, func(int) []string {
		return []string{"-qstash-retries", "2", "-max-attempts", "4", "-backoff", "50ms", "-max-backoff", "100ms", "-lease", "2s", "-publish-timeout", "1s"}
	})
	_ = waitUntil(ctx, 15*time.Second, func(ctx context.Context) (bool, error) {
		o, err := e.check(ctx, nil)
		return o.pending == 0 && o.lost == 0, err
	})
	_ = e.qs.WaitIdle(ctx)
	e.stopWorkers()
	o, _ := e.check(ctx, nil)
	t.Logf("%+v", o)
	res, _ := e.pool.Query(ctx, `SELECT id, left(event_type, 20), attempts, published_at IS NOT NULL, dead_at IS NOT NULL, left(COALESCE(last_error,''), 200) FROM `+e.table("outbox_events")+` o JOIN `+e.table("orders")+` r ON r.event_id = o.id WHERE r.kind = 'bad'`)
	for res.Next() {
		var id, typ, le string
		var att int
		var pub, dead bool
		_ = res.Scan(&id, &typ, &att, &pub, &dead, &le)
		t.Logf("%s %q attempts=%d published=%v dead=%v err=%q accepted=%d", id, typ, att, pub, dead, le, e.proxy.acceptedCount(core.MustParseID(id)))
	}
	for _, d := range e.qs.DLQ() {
		t.Logf("DLQ %s type=%q status=%d retried=%d body=%s", headerValue(d.Message.Header, "ce-id"), headerValue(d.Message.Header, "ce-type"), d.ResponseStatus, d.Message.Retried, d.ResponseBody)
	}
	t.Logf("relay %+v consumer %+v settle-failed %d", e.relays[0].stats(), e.consumer.stats(), e.settleFailed.Load())
}
