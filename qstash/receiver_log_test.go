package qstash_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core/coretest"
	"github.com/outboxkit/outboxkit/qstash"
)

// captureHandler records every log record it is given.
type captureHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *captureHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *captureHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}
func (h *captureHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *captureHandler) WithGroup(string) slog.Handler      { return h }

func (h *captureHandler) snapshot() []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]slog.Record(nil), h.records...)
}

// text renders a record's message and attributes, for searching.
func text(r slog.Record) string {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.Key + "=" + a.Value.String())
		return true
	})
	return b.String()
}

// useDefaultLogger points slog.Default at a capturing handler for the rest
// of the test. Tests calling it must not be parallel: slog.Default is the
// process's.
func useDefaultLogger(t *testing.T) *captureHandler {
	h := &captureHandler{}
	prev := slog.Default()
	slog.SetDefault(slog.New(h))
	t.Cleanup(func() { slog.SetDefault(prev) })
	return h
}

// TestReceiverLogsRefusalsByDefault: with no Logger configured, a refused
// delivery reaches slog.Default at Warn (a receiver that discards its logs
// hides a wrong signing key), the token never appears in it, and a flood of
// forged requests is rate-limited rather than written line for line.
func TestReceiverLogsRefusalsByDefault(t *testing.T) {
	logs := useDefaultLogger(t)
	clock := coretest.NewFakeClock(testNow)
	h, d := &effects{}, &recordingDeduper{}
	rc, _ := newTestReceiver(t, h, d, func(c *qstash.ReceiverConfig) { c.Clock = clock; c.Logger = nil })

	e := testEvent(t)
	forged := signed(t, "sig_not_the_key_at_all_000000000", e)
	const flood = 50
	for range flood {
		if w := serve(rc, deliveryRequest(e, forged)); w.Code != 401 {
			t.Fatalf("forged delivery answered %d, want 401", w.Code)
		}
	}
	recs := logs.snapshot()
	if len(recs) == 0 {
		t.Fatal("a refused delivery logged nothing through slog.Default")
	}
	if len(recs) >= flood {
		t.Errorf("%d forged requests wrote %d log lines: refusals must be rate-limited", flood, len(recs))
	}
	for _, r := range recs {
		if r.Level != slog.LevelWarn {
			t.Errorf("refusal logged at %v, want WARN: %s", r.Level, text(r))
		}
		if s := text(r); strings.Contains(s, forged) || strings.Contains(s, strings.Split(forged, ".")[2]) {
			t.Errorf("the token is in the log: %s", s)
		}
		if s := text(r); !strings.Contains(s, "unauthorized") {
			t.Errorf("refusal log does not say why: %s", s)
		}
	}

	// Once the window has passed, the next refusal is logged again and says
	// how many were left out.
	before := len(recs)
	clock.Advance(time.Minute)
	serve(rc, deliveryRequest(e, forged))
	recs = logs.snapshot()
	if len(recs) != before+1 {
		t.Fatalf("%d new lines after the window, want 1", len(recs)-before)
	}
	if s := text(recs[len(recs)-1]); !strings.Contains(s, "suppressed=") {
		t.Errorf("the line after a suppressed flood does not count what was left out: %s", s)
	}

	// A delivery that applies is not a warning.
	before = len(recs)
	if w := serve(rc, deliveryRequest(e, signed(t, currentKey, e))); w.Code != 200 {
		t.Fatalf("valid delivery answered %d", w.Code)
	}
	if n := len(logs.snapshot()) - before; n != 0 {
		t.Errorf("an applied delivery wrote %d lines at the default level", n)
	}
}
