package qstash_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
	"github.com/outboxkit/outboxkit/qstash"
)

// BenchmarkInboxReceive compares, in one run against one database, the
// receive path of a plain Receiver applying a one-row effect through the
// PostgreSQL Deduper (BEGIN, record, effect, COMMIT) with that of an inbox
// receiver (one INSERT ... ON CONFLICT DO NOTHING). Each op is one signed
// delivery of a new event, token minting included in both.
func BenchmarkInboxReceive(b *testing.B) {
	db := newInboxDB(b)
	in := newTestInbox(b, db, nil)
	dd, err := postgres.NewDeduper(db.pool, &postgres.DeduperConfig{Schema: db.schema, Table: "billing_inbox"})
	if err != nil {
		b.Fatal(err)
	}
	base := qstash.ReceiverConfig{CurrentSigningKey: currentKey, NextSigningKey: nextKey, URL: endpointURL, Clock: fixedClock{testNow}}

	plainCfg := base
	plainCfg.Handler, plainCfg.Deduper, plainCfg.Consumer = db.slowEffect(0), dd, "billing"
	plain, err := qstash.NewReceiver(&plainCfg)
	if err != nil {
		b.Fatal(err)
	}
	inboxCfg := base
	inbox, err := qstash.NewInboxReceiver(in, &inboxCfg)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		rc   *qstash.Receiver
	}{{"receiver+deduper", plain}, {"inbox", inbox}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				e := testEvent(b)
				e.ID = core.NewID()
				req := deliveryRequest(e, signed(b, currentKey, e)).WithContext(context.Background())
				b.StartTimer()
				if w := serve(c.rc, req); w.Code != http.StatusOK {
					b.Fatalf("%d %s", w.Code, w.Body)
				}
			}
		})
	}
}
