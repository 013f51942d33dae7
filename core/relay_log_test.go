package core_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/adapters/memory"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/core/coretest"
)

// syncBuffer is a bytes.Buffer safe for the relay's concurrent workers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) lines(substr string) []string {
	var out []string
	for _, l := range strings.Split(s.String(), "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}

func textLogger(w *syncBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestRelayLogsThroughSlogDefaultByDefault: a relay with no Logger must not
// be silent: its warnings reach slog.Default(), and its chatter does not.
func TestRelayLogsThroughSlogDefaultByDefault(t *testing.T) {
	var buf syncBuffer
	prev := slog.Default()
	t.Cleanup(func() { slog.SetDefault(prev) })
	slog.SetDefault(textLogger(&buf))

	f := newRelayFixture(t, nil, nil, core.RelayConfig{})
	f.pub.FailWith(func(core.Event) error { return errors.New("503 service unavailable") })
	f.add(1)
	if _, err := f.relay.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := buf.lines("level=WARN"); len(got) != 1 || !strings.Contains(got[0], "503 service unavailable") {
		t.Fatalf("default logger wrote %d warnings, want the failed publish:\n%s", len(got), buf.String())
	}
	if got := buf.lines("level=INFO"); len(got) != 0 {
		t.Fatalf("default logger let info lines through:\n%s", buf.String())
	}
}

// TestRelayLogsOneLinePerFailedBatch: a transport outage over two batches
// of a hundred must log two lines, not two hundred, each with the counts by
// outcome and the first error.
func TestRelayLogsOneLinePerFailedBatch(t *testing.T) {
	var buf syncBuffer
	f := newRelayFixture(t, nil, nil, core.RelayConfig{BatchSize: 100, Logger: textLogger(&buf),
		Retry: core.RetryPolicy{MaxAttempts: 2}})
	events := f.add(200)
	refused := events[150].ID
	f.pub.FailWith(func(e core.Event) error {
		if e.ID == refused {
			return core.Permanent(errors.New("400 bad request"))
		}
		return errors.New("503 service unavailable")
	})
	if n, err := f.relay.Drain(context.Background()); err != nil || n != 200 {
		t.Fatalf("Drain = %d, %v; want 200", n, err)
	}
	lines := buf.lines("publish failed")
	if len(lines) != 2 {
		t.Fatalf("%d publish-failure lines for 2 failed batches, want 2:\n%s", len(lines), buf.String())
	}
	for _, want := range []string{"events=100", "retry=100", "first_error=\"503 service unavailable\""} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("first batch's line lacks %s: %s", want, lines[0])
		}
	}
	for _, want := range []string{"level=ERROR", "retry=99", "dead_lettered=1"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("second batch's line (one dead letter) lacks %s: %s", want, lines[1])
		}
	}
}

// flakyClaims fails the next n claims, as an unreachable database does.
type flakyClaims struct {
	core.Store
	mu   sync.Mutex
	fail int
}

func (s *flakyClaims) Claim(ctx context.Context, req core.ClaimRequest) (core.Batch, error) {
	s.mu.Lock()
	fail := s.fail > 0
	if fail {
		s.fail--
	}
	s.mu.Unlock()
	if fail {
		return core.Batch{}, errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
	}
	return s.Store.Claim(ctx, req)
}

// TestRelayLogsWhenClaimsRecover: after a run of failed claims the relay
// says, at warn level so the default filter shows it, that the store is
// reachable again, how many claims failed and for how long.
func TestRelayLogsWhenClaimsRecover(t *testing.T) {
	var buf syncBuffer
	clock := coretest.NewFakeClock(start)
	mem := memory.NewStore(&memory.StoreConfig{Clock: clock})
	store := &flakyClaims{Store: mem, fail: 3}
	relay, err := core.NewRelay(store, memory.NewPublisher(), &core.RelayConfig{Clock: clock, Logger: textLogger(&buf)})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := relay.Drain(context.Background()); err == nil {
			t.Fatalf("claim %d succeeded; want the injected failure", i+1)
		}
		clock.Advance(time.Second)
	}
	if got := buf.lines("succeed again"); len(got) != 0 {
		t.Fatalf("recovery logged while claims still fail: %v", got)
	}
	if _, err := relay.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := relay.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := buf.lines("succeed again")
	if len(got) != 1 {
		t.Fatalf("%d recovery lines after the failing streak ended, want 1:\n%s", len(got), buf.String())
	}
	for _, want := range []string{"level=WARN", "failures=3", "failing_for=3s"} {
		if !strings.Contains(got[0], want) {
			t.Errorf("recovery line lacks %s: %s", want, got[0])
		}
	}
}

// checkedStore is a memory store that can say it is not ready, as a
// PostgreSQL store whose schema is missing does.
type checkedStore struct {
	*memory.Store
	err    error
	claims chan struct{}
	cancel func()
}

func (s *checkedStore) Check(context.Context) error { return s.err }

func (s *checkedStore) Claim(ctx context.Context, req core.ClaimRequest) (core.Batch, error) {
	select {
	case s.claims <- struct{}{}:
	default:
	}
	s.cancel() // a relay that claims has started: stop it
	return s.Store.Claim(ctx, req)
}

// TestRelayRunChecksTheStoreFirst: Run must refuse to start, with the
// store's reason, rather than run silently over a store that cannot work.
func TestRelayRunChecksTheStoreFirst(t *testing.T) {
	missing := errors.New(`relation "outbox.outbox_events" does not exist: run the migrations`)
	for name, checkErr := range map[string]error{"failing": missing, "passing": nil} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			store := &checkedStore{Store: memory.NewStore(nil), err: checkErr, claims: make(chan struct{}, 1), cancel: cancel}
			var _ core.Checker = store
			relay, err := core.NewRelay(store, memory.NewPublisher(), &core.RelayConfig{Concurrency: 1})
			if err != nil {
				t.Fatal(err)
			}
			err = relay.Run(ctx)
			claimed := len(store.claims) > 0
			if checkErr == nil {
				if err != nil || !claimed {
					t.Fatalf("Run over a ready store = %v, claimed %v; want nil after claiming", err, claimed)
				}
				return
			}
			if !errors.Is(err, missing) || !strings.Contains(err.Error(), "did not start") {
				t.Fatalf("Run over a store that failed its check = %v; want an error saying the relay did not start, wrapping the check's", err)
			}
			if claimed {
				t.Fatal("the relay claimed from a store that failed its check")
			}
		})
	}
}
