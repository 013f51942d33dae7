package postgres

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/internal/pgtest"
)

// syncBuffer is a log sink the Listen goroutine and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// storeWithoutPool is a Store as one on a database/sql handle has it:
// no pool, so no connection settings unless cfg.WakeupURL gives some.
func storeWithoutPool(t *testing.T, cfg Config, log *syncBuffer) *Store {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := cfg.WithDefaults()
	n, err := c.validate()
	if err != nil {
		t.Fatal(err)
	}
	wk, err := newWakeupState(nil, c)
	if err != nil {
		t.Fatalf("newWakeupState without a pool: %v", err)
	}
	return &Store{cfg: c, n: n, wakeups: wk}
}

// listenUntil runs s.Listen until cond holds (or the deadline), then
// stops it and returns how often it woke.
func listenUntil(t *testing.T, s *Store, what string, cond func() bool) int64 {
	t.Helper()
	var wakes atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Listen(ctx, func() { wakes.Add(1) }) }()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Listen returned %v, want context.Canceled", err)
	}
	return wakes.Load()
}

// A store without a pool or a WakeupURL has nothing to connect with: its
// Listen polls, saying so once at warn level however often it runs.
func TestListenWithoutPoolPollsAndSaysSoOnce(t *testing.T) {
	t.Parallel()
	log := &syncBuffer{}
	s := storeWithoutPool(t, Config{}, log)
	if s.wakeups.conn != nil {
		t.Fatal("a store without a pool or WakeupURL has wake-up connection settings")
	}
	lines := func() int { return strings.Count(log.String(), "has no LISTEN or replication connection of its own") }
	for i := 1; i <= 2; i++ {
		if n := listenUntil(t, s, "the note that wake-ups are off", func() bool { return lines() >= i }); n != 0 {
			t.Fatalf("Listen %d woke %d times with no connection", i, n)
		}
	}
	if w := strings.Count(log.String(), "level=WARN"); w != 1 {
		t.Fatalf("%d warnings for two Listens, want 1:\n%s", w, log)
	}
	if !strings.Contains(log.String(), "WakeupURL") {
		t.Fatalf("the note does not say what gives the store wake-ups:\n%s", log)
	}
	// WakeupPoll says that polling is meant: nothing to note.
	quiet := &syncBuffer{}
	q := storeWithoutPool(t, Config{Wakeup: WakeupPoll}, quiet)
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if err := q.Listen(ctx, func() {}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Listen with WakeupPoll returned %v", err)
	}
	if quiet.String() != "" {
		t.Fatalf("WakeupPoll logged: %s", quiet)
	}
}

// With WakeupURL, a store without a pool has a wake-up connection: it
// LISTENs (and wakes once connected) as any other.
func TestListenWithoutPoolUsesWakeupURL(t *testing.T) {
	t.Parallel()
	log := &syncBuffer{}
	s := storeWithoutPool(t, Config{WakeupURL: pgtest.URL(), Wakeup: WakeupListen, Schema: "nopool_listen"}, log)
	if s.wakeups.conn == nil {
		t.Fatal("WakeupURL gave no connection settings")
	}
	var woke atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Listen(ctx, func() { woke.Store(true) }) }()
	deadline := time.Now().Add(30 * time.Second)
	for !woke.Load() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Listen returned %v, want context.Canceled", err)
	}
	if !woke.Load() {
		t.Fatalf("Listen on WakeupURL never connected (it wakes once it listens):\n%s", log)
	}
	if strings.Contains(log.String(), "level=WARN") {
		t.Fatalf("a store with WakeupURL warned:\n%s", log)
	}
}
