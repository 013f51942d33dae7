package qstash_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/qstash"
)

// orderingDeduper is a minimal in-memory core.SequencedDeduper: last
// applied sequence per (consumer, aggregate), gaps answered as a sequencer
// answers them (parked ones Permanent).
type orderingDeduper struct {
	recordingDeduper
	mu     sync.Mutex
	last   map[string]int64
	parked bool
}

func (d *orderingDeduper) OnceInOrder(ctx context.Context, consumer string, e core.Event, effect func(context.Context) error) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.last == nil {
		d.last = map[string]int64{}
	}
	k := consumer + "/" + e.AggregateType + "/" + e.AggregateID
	switch l := d.last[k]; {
	case e.Sequence <= l:
		return false, nil
	case e.Sequence > l+1:
		gap := &core.SequenceGapError{Consumer: consumer, AggregateType: e.AggregateType, AggregateID: e.AggregateID, EventID: e.ID, Expected: l + 1, Got: e.Sequence, Parked: d.parked}
		if d.parked {
			return false, core.Permanent(gap)
		}
		return false, core.RetryAfter(gap, 1500*time.Millisecond)
	}
	if err := effect(ctx); err != nil {
		return false, err
	}
	d.last[k] = e.Sequence
	return true, nil
}

func sequenced(t *testing.T, seq int64) core.Event {
	e := testEvent(t)
	e.ID = core.NewID()
	e.Sequence = seq
	return e
}

// TestReceiverGapAnswers503WithRetryAfter: an event ahead of its
// predecessor is answered 503 with the sequencer's hint, nothing applied;
// once the predecessor is applied the retry is 200; a stale one is 200
// without effect.
func TestReceiverGapAnswers503WithRetryAfter(t *testing.T) {
	t.Parallel()
	h := &effects{}
	rc, decisions := newTestReceiver(t, h, &orderingDeduper{})
	e1, e2 := sequenced(t, 1), sequenced(t, 2)

	w := serve(rc, deliveryRequest(e2, signed(t, currentKey, e2)))
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "2" {
		t.Fatalf("gap answered %d, Retry-After %q; want 503 and 2 (1.5 s rounded up)", w.Code, w.Header().Get("Retry-After"))
	}
	if w.Header().Get("Upstash-NonRetryable-Error") != "" || len(h.Applied()) != 0 {
		t.Fatal("a gap was applied or dead-lettered")
	}
	for _, e := range []core.Event{e1, e2} {
		if w := serve(rc, deliveryRequest(e, signed(t, currentKey, e))); w.Code != http.StatusOK {
			t.Fatalf("sequence %d answered %d, want 200", e.Sequence, w.Code)
		}
	}
	// A stale event: an older sequence under a new ID (a replay, say).
	stale := sequenced(t, 1)
	if w := serve(rc, deliveryRequest(stale, signed(t, currentKey, stale))); w.Code != http.StatusOK {
		t.Fatalf("stale event answered %d, want 200", w.Code)
	}
	if got := h.Applied(); len(got) != 2 || got[0].ID != e1.ID || got[1].ID != e2.ID {
		t.Fatalf("applied %d events, want sequences 1 and 2 once each", len(got))
	}
	want := []qstash.Outcome{qstash.OutcomeTransient, qstash.OutcomeApplied, qstash.OutcomeApplied, qstash.OutcomeDuplicate}
	if len(*decisions) != len(want) {
		t.Fatalf("%d decisions, want %d", len(*decisions), len(want))
	}
	for i, d := range *decisions {
		if d.Outcome != want[i] {
			t.Errorf("decision %d = %v, want %v", i, d.Outcome, want[i])
		}
	}
}

// TestReceiverGapParkedAnswers489: a gap the sequencer gave up on is
// permanent, so QStash dead-letters it.
func TestReceiverGapParkedAnswers489(t *testing.T) {
	t.Parallel()
	h := &effects{}
	rc, _ := newTestReceiver(t, h, &orderingDeduper{parked: true})
	e := sequenced(t, 3)
	w := serve(rc, deliveryRequest(e, signed(t, currentKey, e)))
	if w.Code != qstash.StatusNonRetryable || w.Header().Get("Upstash-NonRetryable-Error") != "true" || len(h.Applied()) != 0 {
		t.Fatalf("parked gap answered %d (%q), applied %d; want 489 with Upstash-NonRetryable-Error, nothing applied",
			w.Code, w.Header().Get("Upstash-NonRetryable-Error"), len(h.Applied()))
	}
}

// TestReceiverLogsGapsAtDebug: an early delivery is routine with a
// sequencer (it comes back after its predecessor), so the receiver logs it
// at debug, not as a failed delivery at warn; a real failure still warns.
func TestReceiverLogsGapsAtDebug(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		level   slog.Level
		wantGap bool
	}{{slog.LevelWarn, false}, {slog.LevelDebug, true}} {
		var buf syncBuffer
		logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: tc.level}))
		failing := core.HandlerFunc(func(context.Context, core.Event) error { return errors.New("ledger unavailable") })
		rc, _ := newTestReceiver(t, failing, &orderingDeduper{}, func(c *qstash.ReceiverConfig) { c.Logger = logger })
		e2 := sequenced(t, 2)
		if w := serve(rc, deliveryRequest(e2, signed(t, currentKey, e2))); w.Code != http.StatusServiceUnavailable {
			t.Fatalf("gap answered %d, want 503", w.Code)
		}
		e1 := sequenced(t, 1)
		if w := serve(rc, deliveryRequest(e1, signed(t, currentKey, e1))); w.Code != http.StatusInternalServerError {
			t.Fatalf("failing handler answered %d, want 500", w.Code)
		}
		out := buf.String()
		if got := strings.Contains(out, "delivery ahead of its predecessor"); got != tc.wantGap {
			t.Errorf("logger at %v: gap logged %v, want %v:\n%s", tc.level, got, tc.wantGap, out)
		}
		if strings.Count(out, "qstash: delivery failed") != 1 || !strings.Contains(out, "ledger unavailable") {
			t.Errorf("logger at %v: want exactly the handler's failure at warn:\n%s", tc.level, out)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
