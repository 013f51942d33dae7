package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// channelListener LISTENs on one channel over a connection of its own, so a
// test sees each notification's payload in the order PostgreSQL delivers
// them (commit order).
type channelListener struct {
	conn    *pgx.Conn
	pool    *pgxpool.Pool
	channel string
}

func listenOn(t *testing.T, pool *pgxpool.Pool, channel string) *channelListener {
	t.Helper()
	ctx := ctxT(t)
	conn, err := pgx.Connect(ctx, pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	return &channelListener{conn: conn, pool: pool, channel: channel}
}

// next returns the payload of the next notification.
func (l *channelListener) next(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := l.conn.WaitForNotification(ctx)
	if err != nil {
		t.Fatalf("no notification on %s: %v", l.channel, err)
	}
	return n.Payload
}

// mark sends a notification with a non-empty payload from another session.
// Whatever was sent on the channel before it is delivered before it, so
// when next returns the marker, nothing else had been sent.
func (l *channelListener) mark(t *testing.T, marker string) {
	t.Helper()
	if _, err := l.pool.Exec(ctxT(t), "SELECT pg_notify($1, $2)", l.channel, marker); err != nil {
		t.Fatal(err)
	}
}

// expectMarker fails the test unless the next notification is the marker.
func (l *channelListener) expectMarker(t *testing.T, marker, what string) {
	t.Helper()
	l.mark(t, marker)
	if got := l.next(t); got != marker {
		t.Fatalf("%s: a notification (payload %q) arrived before the marker", what, got)
	}
}

// countSends counts the store's after-commit notifications.
func countSends(s *postgres.Store) *atomic.Int64 {
	var n atomic.Int64
	s.SetBeforeNotifyForTest(func() { n.Add(1) })
	return &n
}

func waitNotified(t *testing.T, s *postgres.Store) {
	t.Helper()
	if err := s.WaitNotifiedForTest(ctxT(t)); err != nil {
		t.Fatalf("after-commit notifications did not finish: %v", err)
	}
}

// startListen runs s.Listen until the test ends; each wake-up becomes a
// value on the returned channel. The wake-up after connecting is consumed
// before startListen returns, so every later value is a notification.
func startListen(t *testing.T, s *postgres.Store) <-chan struct{} {
	t.Helper()
	wakes := make(chan struct{}, 64)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- s.Listen(ctx, func() {
			select {
			case wakes <- struct{}{}:
			default:
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Listen returned %v, want context.Canceled", err)
		}
	})
	waitWake(t, wakes, "the wake-up after Listen connects")
	return wakes
}

func waitWake(t *testing.T, wakes <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-wakes:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func TestNotifyModeString(t *testing.T) {
	for m, want := range map[postgres.NotifyMode]string{
		postgres.NotifyNone:          "none",
		postgres.NotifyInTransaction: "in-transaction",
		postgres.NotifyAfterCommit:   "after-commit",
		postgres.NotifyOff:           "off",
		postgres.NotifyMode(7):       "NotifyMode(7)",
	} {
		if got := m.String(); got != want {
			t.Errorf("NotifyMode(%d).String() = %q, want %q", int(m), got, want)
		}
	}
	// Writers send nothing by default: NOTIFY in the transaction
	// serialises concurrent writers' commits.
	if (postgres.Config{}).Notify != postgres.NotifyNone {
		t.Error("the zero Config notifies")
	}
}

func TestNewRefusesUnknownNotifyMode(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), pgtest.URL()) // connects lazily: New does no I/O
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, m := range []postgres.NotifyMode{-1, postgres.NotifyOff + 1} {
		_, err := postgres.New(pool, &postgres.Config{Notify: m})
		var ce *core.ConfigError
		if !errors.Is(err, core.ErrInvalidConfig) || !errors.As(err, &ce) || ce.Field != "Notify" {
			t.Fatalf("New with Notify %v: err = %v, want a *core.ConfigError for Notify", m, err)
		}
	}
}

func TestWakeupModeString(t *testing.T) {
	for m, want := range map[postgres.WakeupMode]string{
		postgres.WakeupAuto:    "auto",
		postgres.WakeupListen:  "listen",
		postgres.WakeupPoll:    "poll",
		postgres.WakeupMode(9): "WakeupMode(9)",
	} {
		if got := m.String(); got != want {
			t.Errorf("WakeupMode(%d).String() = %q, want %q", int(m), got, want)
		}
	}
	if (postgres.Config{}).Wakeup != postgres.WakeupAuto {
		t.Error("the zero Config does not stream its wake-ups where it can")
	}
}

func TestNewRefusesBadWakeupConfig(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), pgtest.URL()) // connects lazily: New does no I/O
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, tc := range []struct {
		cfg   postgres.Config
		field string
	}{
		{postgres.Config{Wakeup: -1}, "Wakeup"},
		{postgres.Config{Wakeup: postgres.WakeupPoll + 1}, "Wakeup"},
		{postgres.Config{WakeupURL: "postgres://a:b@host:notaport/db"}, "WakeupURL"},
	} {
		_, err := postgres.New(pool, &tc.cfg)
		var ce *core.ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("New(%+v) = %v, want a *core.ConfigError for %s", tc.cfg, err, tc.field)
		}
		if strings.Contains(fmt.Sprint(err), ":b@") {
			t.Errorf("the error quotes the password: %v", err)
		}
	}
}

func TestAfterCommitAddSendsNothingAndNotifyWakes(t *testing.T) {
	t.Parallel()
	db := newDB(t, 3)
	s := newStore(t, db, postgres.Config{Notify: postgres.NotifyAfterCommit})
	sends := countSends(s)
	ctx := ctxT(t)
	l := listenOn(t, db.pool, s.Config().Channel)
	wakes := startListen(t, s)

	for _, n := range []int{1, 3} { // the single-row and the batch statement
		if err := addTx(ctx, s, db.pool, events(t, n, "quiet")...); err != nil {
			t.Fatal(err)
		}
	}
	l.expectMarker(t, "after-add", "Add with NotifyAfterCommit")
	waitWake(t, wakes, "the marker's wake-up") // the marker woke Listen too
	if n := sends.Load(); n != 0 {
		t.Fatalf("%d after-commit notifications sent without a Notify call", n)
	}

	s.Notify()
	waitWake(t, wakes, "the wake-up sent by Notify")
	if got := l.next(t); got != "" {
		t.Fatalf("Notify sent payload %q, want an empty one", got)
	}
	waitNotified(t, s)
	if n := sends.Load(); n != 1 {
		t.Fatalf("one Notify call sent %d notifications, want 1", n)
	}
}

func TestInTxCommitsThenNotifies(t *testing.T) {
	t.Parallel()
	db := newDB(t, 3)
	// NOTIFY's path: a WAL stream would wake on the insert itself.
	s := newStore(t, db, postgres.Config{Notify: postgres.NotifyAfterCommit, Wakeup: postgres.WakeupListen})
	ctx := ctxT(t)
	wakes := startListen(t, s)

	e := mustEvent(t, "order.confirmed", map[string]int{"order": 42})
	var sends atomic.Int64
	var committed int64 = -1
	var countErr error
	s.SetBeforeNotifyForTest(func() {
		sends.Add(1)
		// The notification must follow the commit: the row is visible to
		// another session by the time it is sent.
		countErr = db.pool.QueryRow(context.Background(),
			"SELECT count(*) FROM "+pgx.Identifier{db.schema, "outbox_events"}.Sanitize()+" WHERE id = $1", e.ID.String()).Scan(&committed)
	})
	err := s.InTx(ctx, db.pool, func(tx pgx.Tx) error {
		return s.Add(ctx, tx, e)
	})
	if err != nil {
		t.Fatalf("InTx: %v", err)
	}
	waitWake(t, wakes, "the wake-up InTx sends after committing")
	waitNotified(t, s)
	if n := sends.Load(); n != 1 {
		t.Fatalf("InTx sent %d notifications, want 1", n)
	}
	if countErr != nil {
		t.Fatal(countErr)
	}
	if committed != 1 {
		t.Fatalf("when the notification was sent, %d rows of the event were visible, want 1", committed)
	}
}

func TestInTxRollsBackOnError(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	s := newStore(t, db, postgres.Config{Notify: postgres.NotifyAfterCommit})
	sends := countSends(s)
	ctx := ctxT(t)
	l := listenOn(t, db.pool, s.Config().Channel)

	boom := errors.New("the business change failed")
	err := s.InTx(ctx, db.pool, func(tx pgx.Tx) error {
		if err := s.Add(ctx, tx, mustEvent(t, "x", 1)); err != nil {
			return err
		}
		return boom
	})
	if err != boom {
		t.Fatalf("InTx returned %v, want fn's error unchanged", err)
	}

	// A failed statement that fn ignores aborts the transaction: COMMIT
	// then rolls back, and InTx says so.
	err = s.InTx(ctx, db.pool, func(tx pgx.Tx) error {
		if err := s.Add(ctx, tx, mustEvent(t, "y", 2)); err != nil {
			return err
		}
		_, _ = tx.Exec(ctx, "SELECT 1/0")
		return nil
	})
	if !errors.Is(err, pgx.ErrTxCommitRollback) {
		t.Fatalf("InTx over an aborted transaction returned %v, want pgx.ErrTxCommitRollback", err)
	}

	if err := s.InTx(ctx, nil, func(pgx.Tx) error { return nil }); !errors.Is(err, core.ErrInvalidConfig) {
		t.Fatalf("InTx with a nil db returned %v, want ErrInvalidConfig", err)
	}

	if n := count(t, db, "true"); n != 0 {
		t.Fatalf("%d events committed by failed transactions", n)
	}
	if n := db.pool.Stat().AcquiredConns(); n != 0 {
		t.Fatalf("%d connections still held: a transaction was left open", n)
	}
	waitNotified(t, s)
	if n := sends.Load(); n != 0 {
		t.Fatalf("failed transactions sent %d notifications", n)
	}
	l.expectMarker(t, "after-failures", "failed InTx calls")
}

func TestInTxRollsBackOnPanic(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	s := newStore(t, db, postgres.Config{Notify: postgres.NotifyAfterCommit})
	sends := countSends(s)
	ctx := ctxT(t)

	type boom struct{}
	var recovered any
	func() {
		defer func() { recovered = recover() }()
		_ = s.InTx(ctx, db.pool, func(tx pgx.Tx) error {
			if err := s.Add(ctx, tx, mustEvent(t, "x", 1)); err != nil {
				return err
			}
			panic(boom{})
		})
	}()
	if _, ok := recovered.(boom); !ok {
		t.Fatalf("recovered %v, want fn's panic value", recovered)
	}
	if n := db.pool.Stat().AcquiredConns(); n != 0 {
		t.Fatalf("%d connections still held: the panicking transaction was not rolled back", n)
	}
	if n := count(t, db, "true"); n != 0 {
		t.Fatalf("%d events committed by a panicking transaction", n)
	}
	waitNotified(t, s)
	if n := sends.Load(); n != 0 {
		t.Fatalf("a panicking transaction sent %d notifications", n)
	}
}

// In the other modes Notify sends nothing and InTx is pgx.BeginFunc: with
// NotifyInTransaction the commit delivers Add's own notification.
func TestNotifyDoesNothingInOtherModes(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	ctx := ctxT(t)
	for _, mode := range []postgres.NotifyMode{postgres.NotifyNone, postgres.NotifyInTransaction, postgres.NotifyOff} {
		s := newStore(t, testDB{pool: db.pool, schema: migratedSchema(t, db.pool)}, postgres.Config{Notify: mode})
		sends := countSends(s)
		l := listenOn(t, db.pool, s.Config().Channel)
		if err := s.InTx(ctx, db.pool, func(tx pgx.Tx) error { return s.Add(ctx, tx, mustEvent(t, "x", 1)) }); err != nil {
			t.Fatal(err)
		}
		s.Notify()
		waitNotified(t, s)
		if n := sends.Load(); n != 0 {
			t.Fatalf("%v: Notify sent %d notifications", mode, n)
		}
		if mode == postgres.NotifyInTransaction {
			if got := l.next(t); got != "" {
				t.Fatalf("%v: the commit delivered payload %q, want Add's empty one", mode, got)
			}
		}
		l.expectMarker(t, "end-"+mode.String(), mode.String())
	}
}

// A notification held in flight (by the test hook) collects every Notify
// call made meanwhile into exactly one more.
func TestNotifyCoalescesWhileOneIsInFlight(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	s := newStore(t, db, postgres.Config{Notify: postgres.NotifyAfterCommit})
	l := listenOn(t, db.pool, s.Config().Channel)

	var sends atomic.Int64
	entered := make(chan struct{}, 16)
	release := make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) }) // before newStore's wait
	s.SetBeforeNotifyForTest(func() {
		sends.Add(1)
		entered <- struct{}{}
		<-release
	})

	s.Notify()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first notification was not sent")
	}
	const goroutines, calls = 8, 125
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < calls; i++ {
				s.Notify()
			}
		}()
	}
	returned := make(chan struct{})
	go func() { wg.Wait(); close(returned) }()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("Notify blocked while a notification was in flight")
	}
	releaseOnce.Do(func() { close(release) })
	waitNotified(t, s)
	if n := sends.Load(); n != 2 {
		t.Fatalf("%d Notify calls during one notification led to %d notifications in all, want 2", goroutines*calls+1, n)
	}
	for i := 0; i < 2; i++ {
		if got := l.next(t); got != "" {
			t.Fatalf("notification %d has payload %q", i, got)
		}
	}
}

// However calls interleave with sends, a notification starts after the
// last Notify call began, and calls far outnumber notifications. A shared
// counter orders the calls and the sends without looking at clocks.
func TestNotifyFollowsTheLastCall(t *testing.T) {
	t.Parallel()
	for _, interval := range []time.Duration{0, -1} { // the default, and none
		t.Run(fmt.Sprintf("interval=%v", interval), func(t *testing.T) {
			t.Parallel()
			testNotifyFollowsTheLastCall(t, interval)
		})
	}
}

func testNotifyFollowsTheLastCall(t *testing.T, interval time.Duration) {
	db := newDB(t, 2)
	s := newStore(t, db, postgres.Config{Notify: postgres.NotifyAfterCommit, NotifyInterval: interval})

	var ticks, sends, lastSend atomic.Int64
	s.SetBeforeNotifyForTest(func() {
		sends.Add(1)
		lastSend.Store(ticks.Add(1)) // sends never overlap, so this is the latest
	})
	const goroutines, calls = 16, 200
	lastCall := make([]int64, goroutines)
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < calls; i++ {
				lastCall[g] = ticks.Add(1)
				s.Notify()
			}
		}()
	}
	wg.Wait()
	waitNotified(t, s)

	maxCall := int64(0)
	for _, c := range lastCall {
		maxCall = max(maxCall, c)
	}
	if lastSend.Load() <= maxCall {
		t.Fatalf("the last notification began at tick %d, before the last Notify call (tick %d)", lastSend.Load(), maxCall)
	}
	if n := sends.Load(); n < 1 || n > goroutines*calls/10 {
		t.Fatalf("%d Notify calls sent %d notifications, want between 1 and %d", goroutines*calls, n, goroutines*calls/10)
	}
}

// Notifications are paced at one per NotifyInterval with bursts of two:
// the first two calls, each after the previous notification arrived, are
// notified at once; the calls after them are covered by one more, sent no
// sooner than an interval after the first.
func TestNotifyKeepsTheInterval(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	const interval = time.Second
	s := newStore(t, db, postgres.Config{Notify: postgres.NotifyAfterCommit, NotifyInterval: interval})
	l := listenOn(t, db.pool, s.Config().Channel)

	var mu sync.Mutex
	var sentAt []time.Time
	s.SetBeforeNotifyForTest(func() {
		mu.Lock()
		sentAt = append(sentAt, time.Now())
		mu.Unlock()
	})
	start := time.Now() // before the first send, so before its interval began
	for i := 0; i < 2; i++ {
		s.Notify()
		if got := l.next(t); got != "" {
			t.Fatalf("notification %d has payload %q", i+1, got)
		}
	}
	// Both notifications have been delivered: these calls come after them
	// and must be followed by exactly one more.
	for i := 0; i < 50; i++ {
		s.Notify()
	}
	if got := l.next(t); got != "" {
		t.Fatalf("the third notification has payload %q", got)
	}
	waitNotified(t, s)
	mu.Lock()
	defer mu.Unlock()
	if len(sentAt) != 3 {
		t.Fatalf("52 Notify calls sent %d notifications, want 3", len(sentAt))
	}
	if gap := sentAt[1].Sub(start); gap >= interval {
		t.Fatalf("the second notification was sent %v after the first Notify, want at once (a burst of two)", gap)
	}
	if gap := sentAt[2].Sub(start); gap < interval {
		t.Fatalf("the third notification was sent %v after the first Notify, want at least the interval %v", gap, interval)
	}
}

func TestNotifyIntervalDefault(t *testing.T) {
	if got := (postgres.Config{}).WithDefaults().NotifyInterval; got != postgres.DefaultNotifyInterval {
		t.Fatalf("default NotifyInterval = %v, want %v", got, postgres.DefaultNotifyInterval)
	}
}

// A notification that cannot be sent is logged and dropped.
func TestNotifyFailureIsLogged(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	pool.Close() // every statement now fails
	var logs lockedBuffer
	s, err := postgres.New(pool, &postgres.Config{
		Notify: postgres.NotifyAfterCommit,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Notify()
	waitNotified(t, s)
	if got := logs.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, "outbox notification failed") {
		t.Fatalf("log = %q, want a warning about the failed notification", got)
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// With NotifyOff or WakeupPoll Listen never tries to connect; the other
// modes do at once, which the control half shows through the same dial
// hook.
func TestListenWithNotifyOffNeverConnects(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	dialed := make(chan struct{}, 1)
	cfg.ConnConfig.DialFunc = func(context.Context, string, string) (net.Conn, error) {
		select {
		case dialed <- struct{}{}:
		default:
		}
		return nil, errors.New("test: this pool must not connect")
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	on, err := postgres.New(pool, &postgres.Config{Notify: postgres.NotifyAfterCommit})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- on.Listen(ctx, func() {}) }()
	select {
	case <-dialed:
	case <-time.After(10 * time.Second):
		t.Fatal("control: Listen with NotifyAfterCommit did not try to connect")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("control: Listen returned %v", err)
	}

	for _, cfg := range []postgres.Config{{Notify: postgres.NotifyOff}, {Wakeup: postgres.WakeupPoll}} {
		off, err := postgres.New(pool, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		// A bounded window for something that must not happen at all: a
		// listener that connects does so as soon as it starts, as above.
		octx, ocancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		woken := false
		err = off.Listen(octx, func() { woken = true })
		ocancel()
		if !errors.Is(err, context.DeadlineExceeded) || woken {
			t.Fatalf("Listen with %+v = %v, woken %v; want the context's error and no wake-up", cfg, err, woken)
		}
		select {
		case <-dialed:
			t.Fatalf("Listen with %+v tried to connect", cfg)
		default:
		}
	}
}
