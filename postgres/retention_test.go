package postgres_test

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// retentionLease is the lease row of the default table's retention.
const retentionLease = "outbox_events/retention"

// retentionSeed is what seedRetention wrote, by kind: the IDs of the rows
// retention must keep and of those it must delete.
type retentionSeed struct {
	keep, drop               []string // outbox_events IDs
	keepProcessed, dropProcd []string // outbox_events_processed event IDs
}

func (s *retentionSeed) add(o retentionSeed) {
	s.keep = append(s.keep, o.keep...)
	s.drop = append(s.drop, o.drop...)
	s.keepProcessed = append(s.keepProcessed, o.keepProcessed...)
	s.dropProcd = append(s.dropProcd, o.dropProcd...)
}

// seedRetention writes n rows of every kind retention meets, aged for the
// defaults (published kept 7 days, processed records 30): old and young
// pending events, leased ones, old dead letters, young published events
// and young processed records, which must stay, and old published events
// and old processed records, which must go.
func seedRetention(t *testing.T, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, schema string, n int) retentionSeed {
	t.Helper()
	ob := pgx.Identifier{schema, "outbox_events"}.Sanitize()
	pr := pgx.Identifier{schema, "outbox_events_processed"}.Sanitize()
	ins := func(sets string) []string {
		return retQueryIDs(t, q, `INSERT INTO `+ob+` (event_type, payload, created_at, available_at, published_at, dead_at, lease_token, lease_until, attempts, last_error)
SELECT 'retention.test', '{}', `+sets+` FROM generate_series(1, $1) RETURNING id::text`, n)
	}
	procd := func(age string) []string {
		return retQueryIDs(t, q, `INSERT INTO `+pr+` (consumer, event_id, processed_at)
SELECT 'billing', gen_random_uuid(), now() - interval '`+age+`' FROM generate_series(1, $1) RETURNING event_id::text`, n)
	}
	var s retentionSeed
	// Pending, very old (created and due 60 days ago).
	s.keep = append(s.keep, ins(`now() - interval '60 days', now() - interval '60 days', NULL, NULL, NULL, NULL, 0, NULL`)...)
	// Pending, young.
	s.keep = append(s.keep, ins(`now(), now(), NULL, NULL, NULL, NULL, 0, NULL`)...)
	// Leased, old.
	s.keep = append(s.keep, ins(`now() - interval '60 days', now() - interval '60 days', NULL, NULL, gen_random_uuid(), now() + interval '1 hour', 1, NULL`)...)
	// Dead letters, 60 days old.
	s.keep = append(s.keep, ins(`now() - interval '61 days', now() - interval '61 days', NULL, now() - interval '60 days', NULL, NULL, 10, 'poison'`)...)
	// Published an hour ago: young.
	s.keep = append(s.keep, ins(`now() - interval '2 hours', now() - interval '2 hours', now() - interval '1 hour', NULL, NULL, NULL, 1, NULL`)...)
	// Published 6 days ago: inside the 7 days.
	s.keep = append(s.keep, ins(`now() - interval '6 days', now() - interval '6 days', now() - interval '6 days', NULL, NULL, NULL, 1, NULL`)...)
	// Published 8 and 90 days ago: due.
	s.drop = append(s.drop, ins(`now() - interval '9 days', now() - interval '9 days', now() - interval '8 days', NULL, NULL, NULL, 1, NULL`)...)
	s.drop = append(s.drop, ins(`now() - interval '91 days', now() - interval '91 days', now() - interval '90 days', NULL, NULL, NULL, 3, 'retried'`)...)
	s.keepProcessed = procd("1 day")
	s.dropProcd = procd("40 days")
	return s
}

func retQueryIDs(t *testing.T, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, sql string, args ...any) []string {
	t.Helper()
	rows, err := q.Query(context.Background(), sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return ids
}

// checkRetained fails t unless the table holds exactly the rows s keeps
// (and those of every earlier seed, kept in s too).
func checkRetained(t *testing.T, pool *pgxpool.Pool, schema string, s retentionSeed) {
	t.Helper()
	got := retQueryIDs(t, pool, `SELECT id::text FROM `+pgx.Identifier{schema, "outbox_events"}.Sanitize())
	if !retSameSet(got, s.keep) {
		t.Fatalf("outbox holds %d rows, want exactly the %d to keep; retMissing %v, unexpected %v",
			len(got), len(s.keep), retMissing(s.keep, got), retMissing(got, s.keep))
	}
	got = retQueryIDs(t, pool, `SELECT event_id::text FROM `+pgx.Identifier{schema, "outbox_events_processed"}.Sanitize())
	if !retSameSet(got, s.keepProcessed) {
		t.Fatalf("processed table holds %d rows, want exactly the %d to keep; retMissing %v, unexpected %v",
			len(got), len(s.keepProcessed), retMissing(s.keepProcessed, got), retMissing(got, s.keepProcessed))
	}
}

func retSameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// retMissing returns what of want is not in got.
func retMissing(want, got []string) []string {
	var out []string
	for _, w := range want {
		if !slices.Contains(got, w) {
			out = append(out, w)
		}
	}
	return out
}

// leaseRow reads a lease row by the database's clock.
type retentionLeaseRow struct {
	holder            string
	live              bool // until > now()
	acquired, until   time.Time
	found             bool
	untilMinusNowMsec int64
}

func readRetentionLease(t *testing.T, pool *pgxpool.Pool, schema, name string) retentionLeaseRow {
	t.Helper()
	var s retentionLeaseRow
	err := pool.QueryRow(context.Background(), `SELECT holder, until > now(), acquired_at, until, (extract(epoch FROM until - now()) * 1000)::int8
FROM `+pgx.Identifier{schema, "outboxkit_leases"}.Sanitize()+` WHERE name = $1`, name).
		Scan(&s.holder, &s.live, &s.acquired, &s.until, &s.untilMinusNowMsec)
	if errors.Is(err, pgx.ErrNoRows) {
		return s
	}
	if err != nil {
		t.Fatalf("read lease %s: %v", name, err)
	}
	s.found = true
	return s
}

// runningRetention is a Retention whose Run runs in a goroutine.
type runningRetention struct {
	*postgres.Retention
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

func runRetention[DB postgres.Handle](t *testing.T, db DB, cfg postgres.RetentionConfig) *runningRetention {
	t.Helper()
	r, err := postgres.NewRetention(db, &cfg)
	if err != nil {
		t.Fatalf("NewRetention: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rr := &runningRetention{Retention: r, cancel: cancel, done: make(chan error, 1)}
	go func() { rr.done <- r.Run(ctx) }()
	t.Cleanup(func() {
		if err := rr.stop(); err != nil {
			t.Errorf("Retention %s: Run = %v", cfg.Holder, err)
		}
	})
	return rr
}

// stop cancels Run and returns its error.
func (rr *runningRetention) stop() error {
	rr.once.Do(func() {
		rr.cancel()
		select {
		case rr.err = <-rr.done:
		case <-time.After(15 * time.Second):
			rr.err = errors.New("Run did not return within 15s of its context's end")
		}
	})
	return rr.err
}

// testRetentionConfig is the configuration of the leadership tests: a
// short lease, frequent passes, the default retention periods.
func testRetentionConfig(schema, holder string, lease time.Duration) postgres.RetentionConfig {
	return postgres.RetentionConfig{Schema: schema, Holder: holder, LeaseDuration: lease, Interval: 50 * time.Millisecond}
}

// retentionLeaderMonitor samples the in-process Retentions and the lease row until
// stopped, and records every moment that breaks "one leader at a time":
// two Retentions leading at once, or one that led from before to after a
// read of the lease row whose row did not name it with a live lease.
type retentionLeaderMonitor struct {
	stop, done chan struct{}

	mu         sync.Mutex
	violations []string
	samples    int
	seen       map[string]bool // holders seen leading
}

func monitorRetentionLeaders(t *testing.T, pool *pgxpool.Pool, schema string, rs ...*runningRetention) *retentionLeaderMonitor {
	t.Helper()
	m := &retentionLeaderMonitor{stop: make(chan struct{}), done: make(chan struct{}), seen: map[string]bool{}}
	leaders := func() []string {
		var out []string
		for _, r := range rs {
			if st := r.Stats(); st.Leader {
				out = append(out, st.Holder)
			}
		}
		return out
	}
	go func() {
		defer close(m.done)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-m.stop:
				return
			case <-tick.C:
			}
			before := leaders()
			var holder string
			var live bool
			err := pool.QueryRow(context.Background(), `SELECT holder, until > now() FROM `+pgx.Identifier{schema, "outboxkit_leases"}.Sanitize()+` WHERE name = $1`, retentionLease).Scan(&holder, &live)
			after := leaders()
			m.mu.Lock()
			m.samples++
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				m.violations = append(m.violations, "read the lease row: "+err.Error())
			}
			for _, ls := range [][]string{before, after} {
				if len(ls) > 1 {
					m.violations = append(m.violations, fmt.Sprintf("%v lead at once", ls))
				}
				for _, h := range ls {
					m.seen[h] = true
				}
			}
			for _, h := range before {
				if slices.Contains(after, h) && (holder != h || !live) {
					m.violations = append(m.violations, fmt.Sprintf("%s led throughout a read of the lease row that said holder %q, live %v", h, holder, live))
				}
			}
			m.mu.Unlock()
		}
	}()
	t.Cleanup(m.finish)
	return m
}

// finish stops the monitor and returns what it found.
func (m *retentionLeaderMonitor) finish() {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	<-m.done
}

func (m *retentionLeaderMonitor) check(t *testing.T) {
	t.Helper()
	m.finish()
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.violations) > 0 {
		t.Fatalf("%d of %d samples broke one-leader-at-a-time, e.g. %s", len(m.violations), m.samples, strings.Join(m.violations[:min(5, len(m.violations))], "; "))
	}
	if m.samples < 50 {
		t.Fatalf("the leader monitor took only %d samples: it checked next to nothing", m.samples)
	}
	t.Logf("leader monitor: %d samples, leaders seen %v", m.samples, m.seen)
}

// retentionProc is a retentionproc process (internal/retentiontest).
type retentionProc struct {
	cmd    *exec.Cmd
	stderr retentionLog
	exited chan struct{}

	mu   sync.Mutex
	last retentionProcReport
}

type retentionProcReport struct {
	Leader           bool  `json:"leader"`
	Passes           int64 `json:"passes"`
	PublishedDeleted int64 `json:"published_deleted"`
	ProcessedDeleted int64 `json:"processed_deleted"`
}

type retentionLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *retentionLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *retentionLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// buildRetentionProc builds internal/retentiontest/cmd/retentionproc
// (with -race when the tests have it) into a directory of t's.
func buildRetentionProc(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "retentionproc")
	args := []string{"build", "-o", out}
	if retentionRace {
		args = append(args, "-race")
	}
	args = append(args, "github.com/outboxkit/outboxkit/internal/retentiontest/cmd/retentionproc")
	if b, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return out
}

func startRetentionProc(t *testing.T, bin string, args ...string) *retentionProc {
	t.Helper()
	p := &retentionProc{cmd: exec.Command(bin, args...), exited: make(chan struct{})}
	p.cmd.Stderr = &p.stderr
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() {
		defer close(p.exited)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var r retentionProcReport
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				continue // not a report: stderr has the story
			}
			p.mu.Lock()
			p.last = r
			p.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, stdout)
		_ = p.cmd.Wait()
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if s := p.stderr.String(); strings.Contains(s, "DATA RACE") || strings.Contains(s, "panic:") {
			t.Errorf("retentionproc's stderr:\n%s", s)
		}
	})
	return p
}

func (p *retentionProc) report() retentionProcReport {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// kill SIGKILLs the process, so it hands nothing back, and waits for it.
func (p *retentionProc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill retentionproc: %v", err)
	}
	<-p.exited
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("retentionproc ended with %v, not by our SIGKILL; stderr:\n%s", p.cmd.ProcessState, p.stderr.String())
	}
}

// Three Retentions on one table, one of them in a process of its own:
// exactly one leads at any time (by the lease row and by which one
// deletes), another takes over within a lease of the leader's SIGKILL and
// at once after a graceful stop, and nothing pending or dead-lettered is
// ever deleted.
func TestRetentionThreeOnOneTable(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	bin := buildRetentionProc(t)
	db := newDB(t, 8)
	var all retentionSeed
	first := seedRetention(t, db.pool, db.schema, 3)
	all.add(first)

	a := startRetentionProc(t, bin, "-database-url", pgtest.URL(), "-schema", db.schema, "-holder", "proc-a",
		"-lease", lease.String(), "-interval", "50ms")
	waitFor(t, 20*time.Second, "proc-a to take the lease", func() bool {
		l := readRetentionLease(t, db.pool, db.schema, retentionLease)
		return l.holder == "proc-a" && l.live
	})
	waitFor(t, 10*time.Second, "proc-a to prune the first seed", func() bool {
		return a.report().PublishedDeleted == int64(len(first.drop)) && a.report().ProcessedDeleted == int64(len(first.dropProcd))
	})
	checkRetained(t, db.pool, db.schema, all)

	b := runRetention(t, db.pool, testRetentionConfig(db.schema, "ret-b", lease))
	c := runRetention(t, db.pool, testRetentionConfig(db.schema, "ret-c", lease))
	mon := monitorRetentionLeaders(t, db.pool, db.schema, b, c)
	waitFor(t, 10*time.Second, "ret-b and ret-c to see proc-a lead", func() bool {
		return b.Stats().LeaseHolder == "proc-a" && c.Stats().LeaseHolder == "proc-a"
	})

	// proc-a, not b or c, deletes what becomes due while all three run.
	second := seedRetention(t, db.pool, db.schema, 4)
	all.add(second)
	waitFor(t, 10*time.Second, "proc-a to prune the second seed", func() bool {
		r := a.report()
		return r.PublishedDeleted == int64(len(first.drop)+len(second.drop)) && r.ProcessedDeleted == int64(len(first.dropProcd)+len(second.dropProcd))
	})
	checkRetained(t, db.pool, db.schema, all)
	for _, r := range []*runningRetention{b, c} {
		if st := r.Stats(); st.Leader || st.PublishedDeleted != 0 || st.ProcessedDeleted != 0 || st.Passes != 0 {
			t.Fatalf("%s while proc-a leads: %+v; want a follower that deleted nothing", st.Holder, st)
		}
	}
	if l := readRetentionLease(t, db.pool, db.schema, retentionLease); l.holder != "proc-a" || !l.live {
		t.Fatalf("lease while proc-a runs: %+v", l)
	}

	// SIGKILL: nothing handed back; the lease must run out first.
	before := readRetentionLease(t, db.pool, db.schema, retentionLease)
	killed := time.Now()
	a.kill(t)
	waitFor(t, 3*lease, "a new leader after proc-a's SIGKILL", func() bool { return b.Stats().Leader || c.Stats().Leader })
	took := time.Since(killed)
	leader, follower := b, c
	if c.Stats().Leader {
		leader, follower = c, b
	}
	after := readRetentionLease(t, db.pool, db.schema, retentionLease)
	t.Logf("%s took over %v after the SIGKILL (lease %v); proc-a's lease ran until %v, the new one was taken at %v",
		leader.Stats().Holder, took.Round(time.Millisecond), lease, before.until.Format(time.StampMicro), after.acquired.Format(time.StampMicro))
	if took > lease+lease/4 {
		t.Fatalf("takeover took %v, want within the lease (%v) and a little", took, lease)
	}
	if after.holder != leader.Stats().Holder || !after.live {
		t.Fatalf("lease after the takeover: %+v, want %s's", after, leader.Stats().Holder)
	}
	if after.acquired.Before(before.until) {
		t.Fatalf("the new lease was taken at %v, before proc-a's ran out at %v (database clock)", after.acquired, before.until)
	}
	if gap := after.acquired.Sub(before.until); gap > lease/4 {
		t.Fatalf("the new lease was taken %v after proc-a's ran out; followers must try again when it expires", gap)
	}

	third := seedRetention(t, db.pool, db.schema, 5)
	all.add(third)
	waitFor(t, 10*time.Second, "the new leader to prune the third seed", func() bool {
		st := leader.Stats()
		return st.PublishedDeleted == int64(len(third.drop)) && st.ProcessedDeleted == int64(len(third.dropProcd))
	})
	checkRetained(t, db.pool, db.schema, all)
	if st := follower.Stats(); st.Leader || st.PublishedDeleted != 0 || st.LeaseHolder != leader.Stats().Holder {
		t.Fatalf("the other Retention: %+v; want a follower of %s that deleted nothing", st, leader.Stats().Holder)
	}

	// A graceful stop hands the lease back: the follower takes it without
	// waiting for it to run out.
	stopped := time.Now()
	if err := leader.stop(); err != nil {
		t.Fatalf("Run after a graceful stop = %v, want nil", err)
	}
	if l := readRetentionLease(t, db.pool, db.schema, retentionLease); l.live && l.holder == leader.Stats().Holder {
		t.Fatalf("%s stopped without handing its lease back: %+v", leader.Stats().Holder, l)
	}
	waitFor(t, lease, "the follower to take the handed-back lease", func() bool { return follower.Stats().Leader })
	if took := time.Since(stopped); took > lease/3+lease/4 {
		t.Fatalf("taking a handed-back lease took %v; a follower tries again every third of a lease (%v)", took, lease/3)
	}
	fourth := seedRetention(t, db.pool, db.schema, 2)
	all.add(fourth)
	waitFor(t, 10*time.Second, "the last leader to prune the fourth seed", func() bool {
		st := follower.Stats()
		return st.PublishedDeleted == int64(len(fourth.drop)) && st.ProcessedDeleted == int64(len(fourth.dropProcd))
	})
	checkRetained(t, db.pool, db.schema, all)
	mon.check(t)
}

// A Retention that cannot renew its lease stops pruning before the lease
// could have expired, by the database's clock; one whose lease was taken
// stops at its next renewal.
func TestRetentionStepsDownBeforeItsLeaseExpires(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	db := newDB(t, 4)
	proxy := newRetFreezeProxy(t, db.pool.Config().ConnConfig)
	cfg, err := pgxpool.ParseConfig(pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.MaxConns = "127.0.0.1", proxy.port(), 3
	cfg.ConnConfig.Fallbacks = nil
	far, err := pgxpool.NewWithConfig(ctxT(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(far.Close)
	t.Cleanup(proxy.thaw) // before the pool closes

	r := runRetention(t, far, testRetentionConfig(db.schema, "behind-proxy", lease))
	waitFor(t, 10*time.Second, "the Retention behind the proxy to lead", func() bool { return r.Stats().Leader })
	proxy.freeze()
	frozen := time.Now()
	waitFor(t, lease, "the Retention that cannot renew to stop leading", func() bool { return !r.Stats().Leader })
	l := readRetentionLease(t, db.pool, db.schema, retentionLease)
	t.Logf("stopped leading %v after its connection froze, %dms before its lease ran out", time.Since(frozen).Round(time.Millisecond), l.untilMinusNowMsec)
	if l.holder != "behind-proxy" || !l.live {
		t.Fatalf("lease when it stopped: %+v; it must stop before its lease runs out", l)
	}

	// Another takes over once the lease runs out, and the first one, its
	// connection back, follows.
	other := runRetention(t, db.pool, testRetentionConfig(db.schema, "direct", lease))
	waitFor(t, 2*lease, "the other Retention to take over", func() bool { return other.Stats().Leader })
	proxy.thaw()
	waitFor(t, 2*lease, "the first one to follow the new leader", func() bool { return r.Stats().LeaseHolder == "direct" })
	if r.Stats().Leader {
		t.Fatal("both lead")
	}

	// A lease taken from under the leader (by hand) stops it at its next
	// renewal.
	_, err = db.pool.Exec(ctxT(t), `UPDATE `+pgx.Identifier{db.schema, "outboxkit_leases"}.Sanitize()+`
SET holder = 'operator', until = now() + interval '1 hour' WHERE name = $1`, retentionLease)
	if err != nil {
		t.Fatal(err)
	}
	// At its next renewal (every third of the lease), not once its last
	// renewal would have run out.
	waitFor(t, lease/2, "the leader to notice its lease is gone", func() bool { return !other.Stats().Leader })
	waitFor(t, lease, "both to follow the new holder", func() bool {
		return other.Stats().LeaseHolder == "operator" && r.Stats().LeaseHolder == "operator"
	})
}

// retFreezeProxy forwards TCP to PostgreSQL until frozen: then it holds
// every byte both ways, as a stalled network does, until thawed.
type retFreezeProxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu     sync.Mutex
	cond   *sync.Cond
	frozen bool
	closed bool
	conns  []net.Conn
}

func newRetFreezeProxy(t *testing.T, cc *pgx.ConnConfig) *retFreezeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &retFreezeProxy{ln: ln, target: net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port)))}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *retFreezeProxy) port() uint16 { return uint16(p.ln.Addr().(*net.TCPAddr).Port) }

func (p *retFreezeProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_, _ = c.Close(), s.Close()
			return
		}
		p.conns = append(p.conns, c, s)
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pump(s, c)
		go p.pump(c, s)
	}
}

func (p *retFreezeProxy) pump(dst, src net.Conn) {
	defer p.wg.Done()
	defer func() { _, _ = dst.Close(), src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.frozen && !p.closed {
				p.cond.Wait()
			}
			closed := p.closed
			p.mu.Unlock()
			if closed {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *retFreezeProxy) freeze() {
	p.mu.Lock()
	p.frozen = true
	p.mu.Unlock()
}

func (p *retFreezeProxy) thaw() {
	p.mu.Lock()
	p.frozen = false
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *retFreezeProxy) close() {
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	conns := p.conns
	p.mu.Unlock()
	_ = p.ln.Close()
	for _, c := range conns {
		_ = c.Close()
	}
	p.wg.Wait()
}

// Through PgBouncer in transaction mode, where no session survives a
// transaction: the lease statements still elect one leader, which prunes
// exactly what is due, and hand over on a graceful stop.
func TestRetentionThroughPgBouncer(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	db := bouncerDB(t, 3)
	all := seedRetention(t, db.pool, db.schema, 3)
	a := runRetention(t, bouncerPool(t, 3), testRetentionConfig(db.schema, "bouncer-a", lease))
	waitFor(t, 10*time.Second, "bouncer-a to lead", func() bool { return a.Stats().Leader })
	b := runRetention(t, bouncerPool(t, 3), testRetentionConfig(db.schema, "bouncer-b", lease))
	mon := monitorRetentionLeaders(t, db.pool, db.schema, a, b)
	waitFor(t, 10*time.Second, "bouncer-a to prune", func() bool {
		return a.Stats().PublishedDeleted == int64(len(all.drop)) && a.Stats().ProcessedDeleted == int64(len(all.dropProcd))
	})
	waitFor(t, 10*time.Second, "bouncer-b to see bouncer-a lead", func() bool { return b.Stats().LeaseHolder == "bouncer-a" })
	checkRetained(t, db.pool, db.schema, all)
	if st := b.Stats(); st.Leader || st.PublishedDeleted != 0 {
		t.Fatalf("bouncer-b: %+v; want a follower", st)
	}
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*lease, "bouncer-b to take over", func() bool { return b.Stats().Leader })
	more := seedRetention(t, db.pool, db.schema, 2)
	all.add(more)
	waitFor(t, 10*time.Second, "bouncer-b to prune", func() bool {
		return b.Stats().PublishedDeleted == int64(len(more.drop)) && b.Stats().ProcessedDeleted == int64(len(more.dropProcd))
	})
	checkRetained(t, db.pool, db.schema, all)
	if a.Stats().Passes == 0 || b.Stats().Passes == 0 || a.Stats().LastError != nil || b.Stats().LastError != nil {
		t.Fatalf("passes through PgBouncer: a %+v, b %+v", a.Stats(), b.Stats())
	}
	mon.check(t)
}

// On a *sql.DB (pgx's stdlib driver; adapters/databasesql runs lib/pq):
// leadership and pruning run through database/sql.
func TestRetentionOnSQLDB(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	db := newDB(t, 2)
	sqlDB := stdlib.OpenDBFromPool(db.pool)
	t.Cleanup(func() { _ = sqlDB.Close() })
	all := seedRetention(t, db.pool, db.schema, 3)

	leader := runRetention(t, sqlDB, testRetentionConfig(db.schema, "sql-a", lease))
	waitFor(t, 10*time.Second, "sql-a to prune", func() bool {
		return leader.Stats().PublishedDeleted == int64(len(all.drop)) && leader.Stats().ProcessedDeleted == int64(len(all.dropProcd))
	})
	checkRetained(t, db.pool, db.schema, all)

	// A second one on its own *sql.DB follows; RunOnce says who leads.
	other, err := sql.Open("pgx", pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	once, err := postgres.NewRetention(other, &postgres.RetentionConfig{Schema: db.schema, Holder: "sql-b"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := once.RunOnce(ctxT(t))
	if err != nil || res.Leader || res.Holder != "sql-a" || res.PublishedDeleted != 0 {
		t.Fatalf("RunOnce beside a leader = %+v, %v; want a follower of sql-a", res, err)
	}
	if err := leader.stop(); err != nil {
		t.Fatal(err)
	}
	more := seedRetention(t, db.pool, db.schema, 2)
	all.add(more)
	res, err = once.RunOnce(ctxT(t))
	if err != nil || !res.Leader || res.PublishedDeleted != int64(len(more.drop)) || res.ProcessedDeleted != int64(len(more.dropProcd)) {
		t.Fatalf("RunOnce after the leader stopped = %+v, %v; want it to lead and prune the new seed", res, err)
	}
	checkRetained(t, db.pool, db.schema, all)
	if l := readRetentionLease(t, db.pool, db.schema, retentionLease); l.live {
		t.Fatalf("RunOnce kept its lease: %+v; it must hand it back", l)
	}
}

// RetainForever keeps every published event (and, for RetainProcessed,
// every processed record); the other kind is still pruned.
func TestRetentionKeepsEverything(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	s := seedRetention(t, db.pool, db.schema, 3)
	run := func(cfg postgres.RetentionConfig) postgres.RetentionResult {
		t.Helper()
		cfg.Schema = db.schema
		r, err := postgres.NewRetention(db.pool, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		res, err := r.RunOnce(ctxT(t))
		if err != nil || !res.Leader {
			t.Fatalf("RunOnce = %+v, %v", res, err)
		}
		return res
	}

	res := run(postgres.RetentionConfig{RetainPublished: postgres.RetainForever, RetainProcessed: -time.Hour})
	if res.PublishedDeleted != 0 || res.ProcessedDeleted != 0 || !res.PublishedBefore.IsZero() || !res.ProcessedBefore.IsZero() {
		t.Fatalf("keeping everything: %+v", res)
	}
	everything := s
	everything.keep = append(slices.Clone(s.keep), s.drop...)
	everything.keepProcessed = append(slices.Clone(s.keepProcessed), s.dropProcd...)
	checkRetained(t, db.pool, db.schema, everything)

	res = run(postgres.RetentionConfig{RetainPublished: postgres.RetainForever})
	if res.PublishedDeleted != 0 || res.ProcessedDeleted != int64(len(s.dropProcd)) {
		t.Fatalf("keeping published events only: %+v", res)
	}
	everything.keepProcessed = s.keepProcessed
	checkRetained(t, db.pool, db.schema, everything)

	// The defaults then prune the rest.
	res = run(postgres.RetentionConfig{})
	if res.PublishedDeleted != int64(len(s.drop)) || res.ProcessedDeleted != 0 || res.PublishedBacklog != 0 {
		t.Fatalf("defaults: %+v", res)
	}
	checkRetained(t, db.pool, db.schema, s)
}

// Batches are bounded and paced: BatchSize rows per statement, BatchPause
// after each full one; the backlog says how far behind retention is.
func TestRetentionBatchesArePaced(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	s := seedRetention(t, db.pool, db.schema, 35) // 70 due: 7 full batches of 10, then an empty one
	pr := pgx.Identifier{db.schema, "outbox_events_processed"}.Sanitize()
	if _, err := db.pool.Exec(ctxT(t), `DELETE FROM `+pr); err != nil {
		t.Fatal(err)
	}
	s.keepProcessed, s.dropProcd = nil, nil
	r, err := postgres.NewRetention(db.pool, &postgres.RetentionConfig{Schema: db.schema, BatchSize: 10, BatchPause: 30 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// Before the pass, the backlog: the oldest due row was published 90
	// days ago, 83 days beyond the 7.
	start := time.Now()
	res, err := r.RunOnce(ctxT(t))
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if res.PublishedDeleted != 70 || res.Batches != 7 {
		t.Fatalf("RunOnce = %+v; want 70 rows in 7 batches of 10", res)
	}
	if took < 7*30*time.Millisecond {
		t.Fatalf("7 full batches took %v; each is followed by a 30ms pause", took)
	}
	checkRetained(t, db.pool, db.schema, s)
	st := r.Stats()
	if st.PublishedDeleted != 70 || st.Passes != 1 || st.LastError != nil || st.LastPassAt.IsZero() || st.Leader || st.BacklogMeasuredAt.IsZero() {
		t.Fatalf("Stats after RunOnce = %+v", st)
	}

	// A row no pass deleted (as if retention had stopped) shows in the
	// backlog: published 10 days ago, 3 days beyond the horizon.
	ob := pgx.Identifier{db.schema, "outbox_events"}.Sanitize()
	if _, err := db.pool.Exec(ctxT(t), `INSERT INTO `+ob+` (event_type, payload, published_at) VALUES ('late', '{}', now() - interval '10 days')`); err != nil {
		t.Fatal(err)
	}
	// Lock it, as a replay would: the pass skips it and reports it.
	tx, err := db.pool.Begin(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // test cleanup
	if _, err := tx.Exec(ctxT(t), `SELECT 1 FROM `+ob+` WHERE event_type = 'late' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	res, err = r.RunOnce(ctxT(t))
	if err != nil || res.PublishedDeleted != 0 {
		t.Fatalf("RunOnce with the due row locked = %+v, %v", res, err)
	}
	if res.PublishedBacklog < 3*24*time.Hour-time.Minute || res.PublishedBacklog > 3*24*time.Hour+time.Minute {
		t.Fatalf("backlog %v, want about 72h", res.PublishedBacklog)
	}
	if st := r.Stats(); st.PublishedBacklog != res.PublishedBacklog {
		t.Fatalf("Stats backlog %v, result %v", st.PublishedBacklog, res.PublishedBacklog)
	}
}

// The lease table is shared by a schema's outbox tables: each table's
// retention has its own row, and reverting one table's migrations keeps
// the table for the others.
func TestRetentionLeaseTableSharedBySchema(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, 2)
	schema := freshSchema(t, pool, "retmig")
	ctx := ctxT(t)
	tables := []string{"outbox_events", "billing_outbox"}
	for _, table := range tables {
		if err := postgres.Migrate(ctx, pool, &postgres.MigrateConfig{Schema: schema, Table: table}); err != nil {
			t.Fatal(err)
		}
		r, err := postgres.NewRetention(pool, &postgres.RetentionConfig{Schema: schema, Table: table, Holder: "h-" + table})
		if err != nil {
			t.Fatal(err)
		}
		if res, err := r.RunOnce(ctx); err != nil || !res.Leader {
			t.Fatalf("RunOnce on %s = %+v, %v; each table has its own lease", table, res, err)
		}
	}
	names := func() []string {
		return retQueryIDs(t, pool, `SELECT name FROM `+pgx.Identifier{schema, "outboxkit_leases"}.Sanitize()+` ORDER BY name`)
	}
	if got := names(); !slices.Equal(got, []string{"billing_outbox/retention", "outbox_events/retention"}) {
		t.Fatalf("lease rows %v", got)
	}
	m, err := postgres.NewMigrator(pool, &postgres.MigrateConfig{Schema: schema, Table: "billing_outbox"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Down(ctx, 8); err != nil {
		t.Fatal(err)
	}
	if got := names(); !slices.Equal(got, []string{"outbox_events/retention"}) {
		t.Fatalf("lease rows after reverting billing_outbox's 009: %v", got)
	}
	// A Retention on a table without 009 does not start.
	r, err := postgres.NewRetention(pool, &postgres.RetentionConfig{Schema: schema, Table: "billing_outbox"})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(ctx); !errors.Is(err, postgres.ErrNotMigrated) {
		t.Fatalf("Run on a table at version 8 = %v, want ErrNotMigrated", err)
	}
	m, err = postgres.NewMigrator(pool, &postgres.MigrateConfig{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Down(ctx, 8); err != nil {
		t.Fatal(err)
	}
	if tableExists(t, pool, schema, "outboxkit_leases") {
		t.Fatal("the lease table survived the last table's down migration")
	}
}

func TestRetentionConfig(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, 1)
	r, err := postgres.NewRetention(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := r.Config()
	if c.Schema != "public" || c.Table != "outbox_events" || c.RetainPublished != 7*24*time.Hour || c.RetainProcessed != 30*24*time.Hour ||
		c.BatchSize != 1000 || c.BatchPause != 100*time.Millisecond || c.Interval != time.Minute || c.LeaseDuration != 30*time.Second ||
		c.Holder == "" || c.Logger == nil {
		t.Fatalf("defaults: %+v", c)
	}
	if r2, _ := postgres.NewRetention(pool, nil); r2.Config().Holder == c.Holder {
		t.Fatalf("two default holders are both %q: they must differ", c.Holder)
	}
	r, err = postgres.NewRetention(pool, &postgres.RetentionConfig{RetainPublished: -5 * time.Second, RetainProcessed: postgres.RetainForever})
	if err != nil || r.Config().RetainPublished != postgres.RetainForever || r.Config().RetainProcessed != postgres.RetainForever {
		t.Fatalf("negative retention: %+v, %v", r.Config(), err)
	}
	for _, bad := range []postgres.RetentionConfig{
		{Schema: "no spaces"},
		{BatchSize: -1},
		{Interval: -time.Second},
		{LeaseDuration: 999 * time.Millisecond},
		{LeaseDuration: -time.Second},
		{Holder: "line\nbreak"},
		{Holder: strings.Repeat("h", 201)},
		{Holder: "\xff"},
	} {
		if _, err := postgres.NewRetention(pool, &bad); !errors.Is(err, core.ErrInvalidConfig) {
			t.Errorf("NewRetention(%+v) = %v, want an ErrInvalidConfig", bad, err)
		}
	}
	if _, err := postgres.NewRetention((*pgxpool.Pool)(nil), nil); !errors.Is(err, core.ErrInvalidConfig) {
		t.Errorf("NewRetention(nil pool) = %v", err)
	}
	// Run and RunOnce one at a time.
	db := newDB(t, 2)
	rr := runRetention(t, db.pool, testRetentionConfig(db.schema, "solo", 2*time.Second))
	waitFor(t, 10*time.Second, "solo to lead", func() bool { return rr.Stats().Leader })
	if _, err := rr.RunOnce(ctxT(t)); err == nil {
		t.Fatal("RunOnce while Run runs succeeded")
	}
}
