package postgres

import (
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
)

func xidMsg(typ byte, xids ...uint32) []byte {
	m := []byte{typ}
	for _, x := range xids {
		m = binary.BigEndian.AppendUint32(m, x)
	}
	return m
}

// The tracker wakes at the commits of transactions that inserted, sent
// whole or streamed in chunks interleaved with others, and not at the
// commits of the others.
func TestTxTrackerWakesAtCommitsThatInserted(t *testing.T) {
	var tr txTracker
	steps := []struct {
		msg  []byte
		want bool
	}{
		{[]byte{'B'}, false}, {[]byte{'R'}, false}, {[]byte{'I'}, false}, {[]byte{'C'}, true},
		// A transaction that inserted nothing (older servers send it).
		{[]byte{'B'}, false}, {[]byte{'C'}, false},
		// Transaction 7 streamed in two chunks around transaction 8 sent
		// whole, which inserted nothing, and transaction 9 streamed and
		// aborted.
		{xidMsg('S', 7, 1), false}, {xidMsg('I', 7), false}, {xidMsg('E'), false},
		{[]byte{'B'}, false}, {[]byte{'C'}, false},
		{xidMsg('S', 9, 1), false}, {xidMsg('I', 9), false}, {xidMsg('E'), false},
		{xidMsg('A', 9, 9), false},
		{xidMsg('S', 7, 0), false}, {xidMsg('I', 7), false}, {xidMsg('E'), false},
		{xidMsg('c', 7), true},
		{xidMsg('c', 9), false},
		{nil, false},
	}
	for i, st := range steps {
		if got := tr.commits(st.msg); got != st.want {
			t.Fatalf("step %d (%q): commits = %v, want %v", i, st.msg, got, st.want)
		}
	}
	if len(tr.streamedInserts) != 0 {
		t.Fatalf("streamed transactions left behind: %v", tr.streamedInserts)
	}
}

// The server's refusals that a retry cannot cure become a
// walUnavailableError saying what to do; lost connections do not.
func TestClassifyStreamError(t *testing.T) {
	n, err := newNames("billing", "outbox_events")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		err  error
		want string // in the fix; "" for no walUnavailableError
	}{
		{&pgconn.PgError{Code: "42501", Message: "must be superuser or replication role to start walsender"}, `ALTER ROLE "app" REPLICATION`},
		{&pgconn.PgError{Code: "53300", Message: "number of requested standby connections exceeds max_wal_senders (currently 10)"}, "max_wal_senders"},
		{&pgconn.PgError{Code: "53300", Message: "sorry, too many clients already"}, ""},
		{&pgconn.PgError{Code: "53400", Message: "all replication slots are in use"}, "max_replication_slots"},
		{&pgconn.PgError{Code: "55000", Message: "logical decoding requires wal_level >= logical"}, "wal_level = logical"},
		{&pgconn.PgError{Code: "42704", Message: `publication "outboxkit.billing.outbox_events" does not exist`}, `CREATE PUBLICATION "outboxkit.billing.outbox_events" FOR TABLE "billing"."outbox_events" (id)`},
		{&pgconn.PgError{Code: "08P01", Message: "unsupported startup parameter: replication"}, "WakeupURL"},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, ""},
	} {
		got := classifyStreamError(n, "app", 150000, tc.err)
		var un *walUnavailableError
		switch {
		case tc.want == "" && errors.As(got, &un):
			t.Errorf("%v: classified as unavailable (%v), want it retried", tc.err, got)
		case tc.want == "" && got != tc.err:
			t.Errorf("%v: returned %v, want the error itself", tc.err, got)
		case tc.want != "" && !errors.As(got, &un):
			t.Errorf("%v: not classified as unavailable", tc.err)
		case tc.want != "" && !strings.Contains(un.Fix, tc.want):
			t.Errorf("%v: fix %q lacks %q", tc.err, un.Fix, tc.want)
		case tc.want != "" && !errors.Is(got, tc.err):
			t.Errorf("%v: the server's error is not kept", tc.err)
		}
	}
}

// The publication of a name too long for an identifier is hashed, as the
// channel is; the migration computes the same names in SQL (wal_test.go
// checks the two agree on a real server).
func TestPublicationName(t *testing.T) {
	if got := publicationName("billing", "outbox_events"); got != "outboxkit.billing.outbox_events" {
		t.Errorf("publicationName = %q", got)
	}
	long := publicationName(strings.Repeat("s", 60), "outbox_events")
	if len(long) > maxIdentifierBytes || !strings.HasPrefix(long, "outboxkit_") {
		t.Errorf("long publicationName = %q", long)
	}
	if publicationName("a_b", "c") == publicationName("a", "b_c") {
		t.Error("two tables share a publication name")
	}
}

// The stream pauses after busyFor of commits at busyRate or more, and not
// for a burst, a slower stream or short busy spells between quiet ones.
func TestBusyMeter(t *testing.T) {
	t0 := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	feed := func(b *busyMeter, from time.Time, rate int, d time.Duration) (time.Time, bool) {
		step := time.Second / time.Duration(rate)
		at := from
		for ; at.Before(from.Add(d)); at = at.Add(step) {
			if b.commit(at) {
				return at, true
			}
		}
		return at, false
	}
	b := busyMeter{limits: defaultBusy}
	if _, busy := feed(&b, t0, busyRate/2, 10*time.Second); busy {
		t.Fatal("busy at half the rate")
	}
	b = busyMeter{limits: defaultBusy}
	if _, busy := feed(&b, t0, 10*busyRate, time.Second); busy {
		t.Fatal("busy after a one-second burst")
	}
	b = busyMeter{limits: defaultBusy}
	at, busy := feed(&b, t0, 2*busyRate, 10*time.Second)
	if !busy || at.Sub(t0) > busyFor+2*time.Second {
		t.Fatalf("busy = %v after %v at twice the rate, want true within %v", busy, at.Sub(t0), busyFor+2*time.Second)
	}
	b = busyMeter{limits: defaultBusy}
	at, _ = feed(&b, t0, 2*busyRate, 400*time.Millisecond)
	at, _ = feed(&b, at, busyRate/10, 2*time.Second)
	if _, busy := feed(&b, at, 2*busyRate, 400*time.Millisecond); busy {
		t.Fatal("busy across a quiet spell")
	}
}

// The stream pauses once the WAL it went through over walSpan came at
// walRate or more.
func TestWALMeter(t *testing.T) {
	t0 := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	m := walMeter{limits: defaultBusy}
	step := 100 * time.Millisecond
	pos := pglogrepl.LSN(1 << 30)
	// 8 MiB/s for a minute: no pause.
	for at := t0; at.Before(t0.Add(time.Minute)); at = at.Add(step) {
		pos += 8 << 20 / 10
		if err := m.at(at, pos); err != nil {
			t.Fatalf("paused at 8 MiB/s: %v", err)
		}
	}
	// 32 MiB/s: a pause within two spans.
	start := t0.Add(time.Minute)
	for at := start; ; at = at.Add(step) {
		if at.Sub(start) > 2*costlyFor {
			t.Fatal("no pause at 32 MiB/s")
		}
		pos += 32 << 20 / 10
		var costly *walCostlyError
		if err := m.at(at, pos); errors.As(err, &costly) {
			if !strings.Contains(err.Error(), "MiB of WAL a second") {
				t.Fatalf("error %q", err)
			}
			break
		}
	}
}
