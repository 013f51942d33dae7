package main

import (
	"context"
	"io"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs the example end to end against the local PostgreSQL and
// NATS, so CI covers it.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := configFromEnv()
	cfg.Orders = 20
	cfg.Log = io.Discard
	s, err := run(ctx, cfg)
	if err != nil {
		if s != nil {
			s.print(testWriter{t})
		}
		t.Fatal(err)
	}
	if s.Committed != 20 || s.Lost != 0 || s.Shipped != 19 || s.Poisoned != 1 {
		t.Errorf("committed %d, shipped %d, poisoned %d, lost %d; want 20, 19, 1, 0", s.Committed, s.Shipped, s.Poisoned, s.Lost)
	}
	// One transient failure and one panic, each retried once.
	if s.Retried < 2 {
		t.Errorf("retried %d times, want at least 2", s.Retried)
	}
	if s.Replayed != 19 || s.Duplicates != 19 {
		t.Errorf("replayed %d, duplicates suppressed %d; want 19 and 19", s.Replayed, s.Duplicates)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }
