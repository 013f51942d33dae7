package postgres_test

import (
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

func TestSmoke(t *testing.T) {
	db := newDB(t, 4)
	ctx := ctxT(t)
	for _, ordered := range []bool{false, true} {
		s := newStore(t, db, postgres.Config{Ordering: ordered})
		evs := events(t, 3, "smoke")
		evs[0].AggregateID = "a1"
		evs[1].AggregateID = "a1"
		evs[2].Headers = map[string]string{"traceparent": "x"}
		if err := addTx(ctx, s, db.pool, evs...); err != nil {
			t.Fatal(err)
		}
		b, err := s.Claim(ctx, core.ClaimRequest{Limit: 10, LeaseFor: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range b.Events {
			t.Logf("%v %s seq=%d %s %v att=%d", ordered, e.ID, e.Sequence, e.Payload, e.Headers, e.Attempts)
		}
		var outs []core.Outcome
		for _, e := range b.Events {
			outs = append(outs, core.Outcome{ID: e.ID, Kind: core.Published})
		}
		if err := s.Settle(ctx, core.SettleRequest{Lease: b.Lease, Outcomes: outs}); err != nil {
			t.Fatal(err)
		}
		st, err := s.Stats(ctx)
		t.Logf("%+v %v", st, err)
	}
}
