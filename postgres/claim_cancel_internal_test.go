package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
)

// A claim whose caller's context is cancelled while its round trip is
// under way may commit on the server all the same. Whatever it leased must
// not stay leased under a token nobody holds: these tests stop the round
// trip at every message, cancel, and look at the table.

// cancelRows is how many events a cancelled claim finds, and their payload
// size: large enough that the reply outgrows the server's 8 KiB send
// buffer, so its first rows reach the client before the statement has
// committed.
const (
	cancelRows    = 4
	cancelPayload = 4000
)

// proxiedStore returns a store whose pool reaches PostgreSQL through a
// cutProxy, on a fresh migrated schema holding cancelRows pending events,
// and a direct pool for looking at the table.
func proxiedStore(t *testing.T, cfg Config) (*Store, *cutProxy, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	direct := pgtest.Pool(t, 2)
	schema := pgtest.Schema(t, direct, "pgcut")
	if err := Migrate(ctx, direct, &MigrateConfig{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	pc, err := pgxpool.ParseConfig(pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	p := newCutProxy(t, net.JoinHostPort(pc.ConnConfig.Host, fmt.Sprint(pc.ConnConfig.Port)))
	host, port, _ := net.SplitHostPort(p.addr())
	pc.ConnConfig.Host = host
	fmt.Sscan(port, &pc.ConnConfig.Port)
	pc.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	cfg.Schema, cfg.Notify = schema, NotifyOff
	s, err := New(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := direct.Exec(ctx, `INSERT INTO `+s.n.outbox+` (event_type, payload)
		SELECT 'cut', jsonb_build_object('pad', repeat('x', $1::int)) FROM generate_series(1, $2::int)`, cancelPayload, cancelRows); err != nil {
		t.Fatal(err)
	}
	// The store looks for its claim floor before its first claim and
	// every so often (claimfloor.go), in a statement of its own: done
	// here, and not again, so the cuts land in the statements they name.
	s.plans.floor.every = time.Hour
	if a := s.floorArgs(ctx); a.full {
		t.Fatal("the store did not find its claim floor")
	}
	return s, p, direct
}

// cutPoints are the ways to stop a round trip: before anything is sent
// (the context is already done), with the request held back, and after
// each of the first `after` messages of the reply (the loop finds where
// the reply ends), each with the cancellation once the server finished
// the transaction or at once.
type cutPoint struct {
	name   string
	before bool
	cut    cut
}

func replyCuts(skip, after int) []cutPoint {
	return []cutPoint{
		{name: fmt.Sprintf("reply after %d messages, cancelled once committed", after), cut: cut{skip: skip, after: after, wait: true}},
		{name: fmt.Sprintf("reply after %d messages, cancelled at once", after), cut: cut{skip: skip, after: after}},
	}
}

// cancelledCall runs call under a context cancelled once p's cut is in
// place, and reports whether the cut ever was (a cut past the end of the
// reply never is: the call simply succeeds).
func cancelledCall(t *testing.T, p *cutProxy, point cutPoint, call func(ctx context.Context) error) (cutInPlace bool, err error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if point.before {
		cancel()
		return true, call(ctx)
	}
	c := point.cut
	p.arm(&c)
	done := make(chan error, 1)
	go func() { done <- call(ctx) }()
	select {
	case <-c.ready:
		cancel()
		err = <-done
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: neither the cut nor the call finished within 30s", point.name)
	}
	return p.disarm(), err
}

// leases returns the lease token of every leased row and the sum of all
// attempts.
func leases(t *testing.T, direct *pgxpool.Pool, s *Store) (map[core.ID]int, int) {
	t.Helper()
	rows, err := direct.Query(context.Background(), "SELECT lease_token, attempts FROM "+s.n.outbox)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	tokens := map[core.ID]int{}
	attempts := 0
	for rows.Next() {
		var tok pgtype.UUID
		var a int
		if err := rows.Scan(&tok, &a); err != nil {
			t.Fatal(err)
		}
		if tok.Valid {
			tokens[tok.Bytes]++
		}
		attempts += a
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return tokens, attempts
}

// checkHeld fails unless every leased row is leased under one of the
// tokens held (with the number of rows each should hold), and no attempt
// is charged beyond those rows.
func checkHeld(t *testing.T, what string, direct *pgxpool.Pool, s *Store, held map[core.ID]int) {
	t.Helper()
	tokens, attempts := leases(t, direct, s)
	want := 0
	for tok, n := range held {
		want += n
		if tokens[tok] != n {
			t.Errorf("%s: %d rows leased under a held token, want %d", what, tokens[tok], n)
		}
	}
	for tok, n := range tokens {
		if _, ok := held[tok]; !ok {
			t.Errorf("%s: %d rows left leased under a token nobody holds", what, n)
		}
	}
	if attempts != want {
		t.Errorf("%s: %d attempts charged, want %d (one per row still leased)", what, attempts, want)
	}
}

// releaseBatch gives a batch back, leaving the table as it was before the
// claim. Events already given back are no longer the lease's, which is
// fine here.
func releaseBatch(t *testing.T, s *Store, b core.Batch) {
	t.Helper()
	if len(b.Events) == 0 {
		return
	}
	out := make([]core.Outcome, len(b.Events))
	for i, e := range b.Events {
		out[i] = core.Outcome{ID: e.ID, Kind: core.Released}
	}
	if err := s.Settle(context.Background(), core.SettleRequest{Lease: b.Lease, Outcomes: out}); err != nil && !errors.Is(err, core.ErrLeaseLost) {
		t.Fatal(err)
	}
}

// forEachCut runs try for the fixed cut points and then for reply cuts
// after 0, 1, 2... messages until a cut is no longer put in place: the
// reply had ended.
func forEachCut(t *testing.T, skip int, try func(point cutPoint) (cutInPlace bool)) {
	t.Helper()
	try(cutPoint{name: "context done before the call", before: true})
	try(cutPoint{name: "request held back", cut: cut{request: true}})
	for after := 0; ; after++ {
		if after > 50 {
			t.Fatal("the reply never ended")
		}
		any := false
		for _, point := range replyCuts(skip, after) {
			if try(point) {
				any = true
			}
		}
		if !any {
			return
		}
	}
}

func TestCancelledClaimLeavesNothingLeased(t *testing.T) {
	t.Parallel()
	for _, grown := range []bool{false, true} {
		t.Run(fmt.Sprintf("grown=%v", grown), func(t *testing.T) {
			t.Parallel()
			s, p, direct := proxiedStore(t, Config{})
			s.grown.Store(grown)
			forEachCut(t, 0, func(point cutPoint) bool {
				var b core.Batch
				inPlace, err := cancelledCall(t, p, point, func(ctx context.Context) error {
					var err error
					b, err = s.Claim(ctx, core.ClaimRequest{Limit: 10, LeaseFor: time.Minute})
					return err
				})
				held := map[core.ID]int{}
				if err == nil {
					held[b.Lease.Token] = len(b.Events)
				}
				checkHeld(t, point.name, direct, s, held)
				releaseBatch(t, s, b)
				return inPlace && !point.before
			})
		})
	}
}

// TestCancelledSettleAndClaimLeavesNothingLeased stops the pipelined
// settlement and claim anywhere in their round trip: in the settlement's
// reply (skip 0) or the claim's (skip 1).
func TestCancelledSettleAndClaimLeavesNothingLeased(t *testing.T) {
	t.Parallel()
	for _, skip := range []int{0, 1} {
		t.Run(fmt.Sprintf("skip=%d", skip), func(t *testing.T) {
			t.Parallel()
			s, p, direct := proxiedStore(t, Config{})
			s.grown.Store(true) // pipelined
			forEachCut(t, skip, func(point cutPoint) bool {
				first, err := s.Claim(context.Background(), core.ClaimRequest{Limit: 1, LeaseFor: time.Minute})
				if err != nil || len(first.Events) != 1 {
					t.Fatalf("claim the batch to settle: %d events, %v", len(first.Events), err)
				}
				var next core.Batch
				var settleErr, claimErr error
				inPlace, _ := cancelledCall(t, p, point, func(ctx context.Context) error {
					next, settleErr, claimErr = s.SettleAndClaim(ctx,
						core.SettleRequest{Lease: first.Lease, Outcomes: []core.Outcome{{ID: first.Events[0].ID, Kind: core.Released}}},
						core.ClaimRequest{Limit: 10, LeaseFor: time.Minute})
					return claimErr
				})
				held := map[core.ID]int{}
				if claimErr == nil {
					held[next.Lease.Token] = len(next.Events)
				}
				if settleErr != nil {
					// Not settled, or not known to be: the first batch is
					// still the caller's to settle.
					tokens, _ := leases(t, direct, s)
					if n := tokens[first.Lease.Token]; n > 0 {
						held[first.Lease.Token] = n
					}
				}
				checkHeld(t, point.name, direct, s, held)
				releaseBatch(t, s, next)
				if settleErr != nil {
					releaseBatch(t, s, first)
				}
				return inPlace && !point.before
			})
		})
	}
}

// TestCancelledTopUpLeavesNothingLeased stops the second statement of a
// slot claim that came back short: the claim still returns the slot's
// events, and nothing else may stay leased under its token.
func TestCancelledTopUpLeavesNothingLeased(t *testing.T) {
	t.Parallel()
	s, p, direct := proxiedStore(t, Config{})
	ctx := context.Background()
	// Positions 64 and up are slot 1, which the sequence deals first:
	// the slot claim finds 3 events there, the top-up the rest.
	if _, err := direct.Exec(ctx, `INSERT INTO `+s.n.outbox+` (event_type, payload, pos)
		SELECT 'slot1', '{}', 64 + g FROM generate_series(0, 2) g`); err != nil {
		t.Fatal(err)
	}
	forEachCut(t, 1, func(point cutPoint) bool {
		if point.before || point.cut.request {
			return false // the slot claim's own cancellation: TestCancelledClaimLeavesNothingLeased
		}
		if _, err := direct.Exec(ctx, `SELECT setval('`+s.n.claimSlot+`', 1, false)`); err != nil {
			t.Fatal(err)
		}
		s.backlog.Store(true)
		var b core.Batch
		inPlace, err := cancelledCall(t, p, point, func(ctx context.Context) error {
			var err error
			b, err = s.Claim(ctx, core.ClaimRequest{Limit: 10, LeaseFor: time.Minute})
			return err
		})
		if err != nil {
			t.Fatalf("%s: the claim failed (%v); only its top-up was cut", point.name, err)
		}
		if inPlace && len(b.Events) != 3 {
			var types []string
			for _, e := range b.Events {
				types = append(types, e.Type)
			}
			t.Fatalf("%s: the claim returned %v, want the slot's 3 events alone", point.name, strings.Join(types, ", "))
		}
		checkHeld(t, point.name, direct, s, map[core.ID]int{b.Lease.Token: len(b.Events)})
		releaseBatch(t, s, b)
		return inPlace
	})
}

// TestAbandonWaitsForAClaimStillRunning: the caller gave up on a claim
// the server is still running, and pgx's cancel request is lost (the
// proxy drops it). The give-back must wait for the claim's transaction
// (the lease's advisory lock) rather than look at the table before the
// claim commits and miss its rows.
func TestAbandonWaitsForAClaimStillRunning(t *testing.T) {
	t.Parallel()
	s, p, direct := proxiedStore(t, Config{})
	p.mu.Lock()
	p.dropCancels = true
	p.mu.Unlock()
	ctx := ctxTest(t)

	// A trigger holds the claim on the server after it leased its rows,
	// until the test lets go of an advisory lock.
	const gate = 7350001
	gateConn, err := direct.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer gateConn.Release()
	fn := pgx.Identifier{s.n.schema, "hold_claims"}.Sanitize()
	for _, q := range []string{
		`CREATE FUNCTION ` + fn + `() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_advisory_xact_lock_shared(` + fmt.Sprint(gate) + `); RETURN NULL; END $$`,
		`CREATE TRIGGER hold_claims AFTER UPDATE ON ` + s.n.outbox + ` FOR EACH ROW
		WHEN (NEW.lease_token IS NOT NULL) EXECUTE FUNCTION ` + fn + `()`,
	} {
		if _, err := direct.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := gateConn.Exec(ctx, `SELECT pg_advisory_lock($1)`, gate); err != nil {
		t.Fatal(err)
	}
	gateHeld := true
	defer func() {
		if gateHeld {
			_, _ = gateConn.Exec(context.Background(), `SELECT pg_advisory_unlock($1)`, gate)
		}
	}()
	waiting := func(what string) func() bool {
		// Backends of this database waiting on an advisory lock: the
		// claim on the gate, then the give-back on the claim's lease.
		return func() bool {
			var n int
			if err := direct.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = 'advisory'
					AND query LIKE $1`, what).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n > 0
		}
	}

	claimCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := s.Claim(claimCtx, core.ClaimRequest{Limit: 10, LeaseFor: time.Minute})
		done <- err
	}()
	// (pg_stat_activity keeps the first KiB of a query: the claim's start.)
	claimWaits := waiting("%UPDATE " + s.n.outbox + " t%SET lease_token = CASE%")
	releaseWaits := func() bool {
		// Someone waits for the lease lock our claim holds.
		var n int
		if err := direct.QueryRow(ctx, `SELECT count(*) FROM pg_locks w
			JOIN pg_locks g ON g.locktype = 'advisory' AND g.granted
				AND g.classid = w.classid AND g.objid = w.objid AND g.objsubid = w.objsubid
			JOIN pg_stat_activity a ON a.pid = g.pid
			WHERE w.locktype = 'advisory' AND NOT w.granted AND w.classid = `+leaseLockClass+` AND a.query LIKE $1`,
			"%UPDATE "+s.n.outbox+" t%SET lease_token = CASE%").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	var claimErr error
	returned := false
	poll(t, "the claim to wait at the gate", func() bool { return claimWaits() })
	cancel()
	// The give-back now waits on the claim's lease lock, or (were it not
	// to) the claim returns at once, having looked at the table too early.
	poll(t, "the give-back to wait for the claim, or the claim to return", func() bool {
		select {
		case claimErr = <-done:
			returned = true
			return true
		default:
			return releaseWaits()
		}
	})
	if _, err := gateConn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, gate); err != nil {
		t.Fatal(err)
	}
	gateHeld = false
	if !returned {
		select {
		case claimErr = <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the claim did not return within 30s of the gate opening")
		}
	}
	if claimErr == nil {
		t.Fatal("the claim succeeded although its caller gave up")
	}
	// The claim's transaction has ended by now either way: it held the
	// gate's shared lock until it did.
	if _, err := gateConn.Exec(ctx, `SELECT pg_advisory_lock($1), pg_advisory_unlock($1)`, gate); err != nil {
		t.Fatal(err)
	}
	checkHeld(t, "claim cancelled while the server ran it", direct, s, nil)
}

func ctxTest(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// poll checks cond until it holds, failing the test after 30s. It waits for
// what other processes (the server's backends) do, which nothing here can
// be told of.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
