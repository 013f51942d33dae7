package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// TestMain doubles as the relay process of the scale-out workload: the
// harness re-executes its own binary, which under go test is this test
// binary, with childEnv set.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	goleak.VerifyTestMain(m)
}

// TestSmoke runs a tiny configuration of the harness end to end (drain of
// every system, River's included, and scale-out with two relay processes)
// so CI keeps it working, and checks what the full run relies on: every
// event arrived, every row is marked, and no event was published twice
// under one lease. 1,000 events, because River's defaults work about 1,000
// jobs a second.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped with -short: runs PostgreSQL and two relay processes")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"-workloads", "drain,scaleout", "-events", "1000", "-reps", "1",
		"-batches", "100", "-procs", "2", "-json"}, nil, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("run exited %d:\n%s", code, stderr.String())
	}
	var rep Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("JSON output: %v\n%s", err, stdout.String())
	}

	for _, sys := range []string{sysOutboxkit, sysWatermill, sysCeiling, sysDelete} {
		s := rep.find("drain", "batch=100", sys, "events/s")
		if s == nil || len(s.Values) != 1 || !(s.Median > 0) {
			t.Errorf("drain %s: series %+v, want one positive value", sys, s)
		}
	}
	tunedSys := (&bench{o: &options{riverWorkers: 1000, riverCooldown: 5 * time.Millisecond, riverPoll: 10 * time.Millisecond}}).riverTunedSys()
	for _, sys := range []string{sysRiverDefaults, tunedSys} {
		s := rep.find("drain", caseRiver, sys, "events/s")
		if s == nil || len(s.Values) != 1 || !(s.Median > 0) {
			t.Errorf("drain %s: series %+v, want one positive value", sys, s)
		}
	}
	if q := rep.findRatio("drain", "batch=100", "outboxkit / River tuned"); q == nil || !(q.Median > 0) {
		t.Errorf("drain ratio to River tuned: %+v", q)
	}
	if rep.Options.River == nil || rep.Options.River.Version != "v0.51.2" {
		t.Errorf("River in the report's options: %+v, want v0.51.2", rep.Options.River)
	}
	scaleSys := fmt.Sprintf("%s batch=%d", sysOutboxkit, 100)
	if s := rep.find("scaleout", "procs=2", scaleSys, "events/s"); s == nil || !(s.Median > 0) {
		t.Errorf("scaleout procs=2: series %+v, want a positive throughput", s)
	}
	if s := rep.find("scaleout", "procs=2", scaleSys, "peak RSS MiB"); s == nil || !(s.Median > 1) {
		t.Errorf("scaleout procs=2: peak RSS %+v, want a measurement", s)
	}

	var drains, scales int
	for _, c := range rep.Checks {
		if !c.OK {
			t.Errorf("check failed: %+v", c)
		}
		switch c.Workload {
		case "drain":
			drains++
		case "scaleout":
			scales++
			if !strings.Contains(c.Detail, "1000 publishes of 1000 events by 2 processes") ||
				!strings.Contains(c.Detail, "0 never published, 0 published more than once (0 pairs under one lease") {
				t.Errorf("scaleout check: %s", c.Detail)
			}
		}
	}
	if drains != 6 || scales != 1 {
		t.Errorf("got %d drain and %d scaleout checks, want 6 and 1", drains, scales)
	}
	if len(rep.Targets) == 0 || !strings.Contains(stderr.String(), "## Targets") {
		t.Errorf("no targets table on stderr:\n%s", stderr.String())
	}
}

// TestSmokeRiver runs the River paths of the latency and write workloads,
// and outboxkit's defaults beside them, at tiny sizes (the drain's are in
// TestSmoke): the full workloads would take minutes, the paths a few
// seconds.
func TestSmokeRiver(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped with -short: runs PostgreSQL and River")
	}
	// Beside TestSmoke: each measures only that its systems work, not how
	// fast, and together they take the time of the longer.
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o, err := parseOptions([]string{"-latency-duration", "1s", "-write-duration", "250ms", "-writers", "4"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := newPool(ctx, o.dsn, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var logs bytes.Buffer
	b := &bench{o: o, admin: admin, log: io.Discard, stderr: &lockedWriter{w: &logs}, rep: &Report{}}
	defer b.dropLeftovers(context.Background())

	for name, lat := range map[string]func() (latencyResult, error){
		"River defaults":     func() (latencyResult, error) { return b.latencyRiver(ctx, 200, riverDefaults(), "") },
		"outboxkit defaults": func() (latencyResult, error) { return b.latencyOutboxkit(ctx, 200, latencyVariant{defaults: true}, "") },
	} {
		res, err := lat()
		if err != nil {
			t.Fatalf("latency %s: %v", name, err)
		}
		if !res.check.OK || !(res.p50 > 0) || res.p99 < res.p50 {
			t.Errorf("latency %s: p50 %v p99 %v, check %+v", name, res.p50, res.p99, res.check)
		}
	}

	ws, err := b.writeSchema(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.drop() //nolint:errcheck // dropLeftovers tries again
	cases := b.insertCases()
	if len(cases) != 7 {
		t.Errorf("%d insert cases, want 7 (with -extras and -river)", len(cases))
	}
	for _, c := range cases {
		if err := resetWrite(ctx, ws); err != nil {
			t.Fatal(err)
		}
		res, err := b.writeInsert(ctx, ws, c, "")
		if err != nil {
			t.Fatalf("write %s %s: %v", c.name, c.system, err)
		}
		if !(res.tps > 0) || c.consume != (res.consumed > 0) {
			t.Errorf("write %s %s: %.0f tx/s, %.0f consumed/s", c.name, c.system, res.tps, res.consumed)
		}
	}
	// Rows where each case's writer put them: the last River case's jobs,
	// worked by its client, are in River's schema.
	if n, err := tableCount(ctx, ws.river, "river_job"); err != nil || n == 0 {
		t.Errorf("river_job holds %d rows (%v), want the last case's jobs", n, err)
	}
	if logs.Len() > 0 {
		t.Logf("River's log:\n%s", logs.String())
	}
}

// TestSmokeIdle runs the idle workload for a second per variant and checks
// that each relay held the wake-up connection its mode opens (the WAL
// stream with the defaults, on a server with wal_level = logical, as CI's
// is) and that the report holds its figures and its target.
func TestSmokeIdle(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped with -short: runs PostgreSQL")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep := runJSON(ctx, t, "-workloads", "idle", "-idle-duration", "1s", "-reps", "1")
	o, err := parseOptions([]string{"-idle-duration", "1s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cas := (&bench{o: o}).idleCase()
	for _, v := range idleVariants {
		for _, m := range []string{"PG CPU % of one core", "bench process CPU % of one core", "pool acquires/s", "server WAL MiB/s (all writers)"} {
			if s := rep.find("idle", cas, v.sys, m); s == nil || len(s.Values) != 1 || !(s.Median >= 0) || math.IsInf(s.Median, 0) {
				t.Errorf("idle %s %s: series %+v, want one value ≥ 0", v.sys, m, s)
			}
		}
	}
	walLevel := showSetting(ctx, t, o.dsn, "wal_level")
	want := map[string]string{sysDefaults: "wake-up " + wakeupWAL + " at the start", sysIdleListen: "wake-up " + wakeupListen + " at the start", sysIdlePoll: "wake-up " + wakeupNone + " at the start"}
	if walLevel != "logical" {
		want[sysDefaults] = "wake-up " + wakeupListen + " at the start"
	}
	checks := 0
	for _, c := range rep.Checks {
		if c.Workload != "idle" {
			continue
		}
		checks++
		if !c.OK || !strings.Contains(c.Detail, want[c.System]) {
			t.Errorf("idle check %s: ok=%v %q, want ok and %q", c.System, c.OK, c.Detail, want[c.System])
		}
	}
	if checks != len(idleVariants) {
		t.Errorf("%d idle checks, want %d", checks, len(idleVariants))
	}
	if tg := findTarget(rep, "idle relay (defaults) ≤ 1 % of one core of PostgreSQL"); tg == nil || !tg.Found || tg.Unit != "%" {
		t.Errorf("idle target: %+v, want it measured", tg)
	}
}

// TestSmokeGrowth runs the growth workload at tiny sizes and checks its
// series, ratios and targets.
func TestSmokeGrowth(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped with -short: runs PostgreSQL")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep := runJSON(ctx, t, "-workloads", "growth", "-events", "2000", "-growth-events", "5000", "-growth-retained", "10000", "-batches", "100", "-reps", "1")
	for _, cas := range []string{"batch=100 backlog=2,000", "batch=100 backlog=5,000", "batch=100 backlog=2,000 retained=10,000"} {
		for _, m := range []string{"events/s", "claim index pages/event"} {
			if s := rep.find("growth", cas, sysOutboxkit, m); s == nil || len(s.Values) != 1 || !(s.Median > 0) {
				t.Errorf("growth %s %s: series %+v, want one positive value", cas, m, s)
			}
		}
		if s := rep.find("growth", cas, sysOutboxkit, "PG CPU µs/event"); s == nil || !(s.Median >= 0) {
			t.Errorf("growth %s: PG CPU series %+v", cas, s)
		}
	}
	for _, q := range [][2]string{{"batch=100 backlog=5,000", "5,000 / 2,000 backlog"}, {"batch=100 backlog=2,000 retained=10,000", "with 10,000 retained / without"}} {
		if r := rep.findRatio("growth", q[0], q[1]); r == nil || !(r.Median > 0) {
			t.Errorf("growth ratio %q: %+v", q[1], r)
		}
	}
	for _, name := range []string{"growth batch 100: 5,000 backlog ≥ 0.9 × the 2,000 backlog's rate", "growth batch 100: 10,000 published rows kept ≥ 0.95 × the rate without"} {
		if tg := findTarget(rep, name); tg == nil || !tg.Found || !(tg.Value > 0) {
			t.Errorf("target %q: %+v, want it measured", name, tg)
		}
	}
	checks := 0
	for _, c := range rep.Checks {
		if c.Workload == "growth" {
			checks++
			if !c.OK || !strings.Contains(c.Detail, "0 rows still pending") {
				t.Errorf("growth check %s: %+v", c.Case, c)
			}
		}
	}
	if checks != 3 {
		t.Errorf("%d growth checks, want 3", checks)
	}
}

// TestSmokePartitions runs the partitions workload at a tiny size (both
// layouts, 5,000 rows kept, a backlog of 2,000, a day of 2,000 retired) and
// the partition soak for a few seconds with its layouts side by side: every
// trial's checks pass (the kept tables VACUUMed between trials), and the
// soak's samples (sizes, dead rows, VACUUMs) and the retire target are
// measured.
func TestSmokePartitions(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped with -short: runs PostgreSQL")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep := runJSON(ctx, t, "-workloads", "partitions,partition-soak", "-events", "2000", "-batches", "100", "-reps", "1",
		"-partition-retained", "5000", "-partition-days", "2", "-partition-rate", "500", "-latency-duration", "1s", "-partition-retire", "2000",
		"-soak-duration", "3s", "-soak-rate", "200", "-soak-retention", "1s", "-soak-together")
	for _, sys := range []string{sysPlain, sysDaily} {
		for _, cas := range []string{"drain batch=100 empty", "drain batch=100 retained=5,000"} {
			if s := rep.find("partitions", cas, sys, "events/s"); s == nil || len(s.Values) != 1 || !(s.Median > 0) {
				t.Errorf("partitions %s %s: series %+v, want one positive value", cas, sys, s)
			}
		}
		if s := rep.find("partitions", "latency 500/s retained=5,000", sys, "p50 ms"); s == nil || !(s.Median > 0) {
			t.Errorf("partitions latency %s: series %+v", sys, s)
		}
	}
	if tg := findTarget(rep, "partitions: retire one day, daily partitions ≤ 1 s"); tg == nil || !tg.Found || !(tg.Value > 0) {
		t.Errorf("retire target: %+v, want it measured", tg)
	}
	for _, sys := range []string{sysPlain, "5m partitions"} {
		cas := "200/s for 3s, retention 1s"
		if s := rep.find("partition-soak", cas, sys, "events relayed"); s == nil || s.Median != 600 {
			t.Errorf("soak %s: events relayed %+v, want 600", sys, s)
		}
		for _, m := range []string{"MiB at the end", "dead rows / all rows at the end", "vacuums"} {
			if s := rep.find("partition-soak", cas, sys, m); s == nil || !(s.Median >= 0) {
				t.Errorf("soak %s %s: series %+v", sys, m, s)
			}
		}
	}
	checks := 0
	for _, c := range rep.Checks {
		if c.Workload == "partitions" {
			checks++
			if !c.OK {
				t.Errorf("partitions check %s %s: %+v", c.Case, c.System, c)
			}
		}
	}
	if checks != 10 {
		t.Errorf("%d partitions checks, want 10 (4 drains, 4 latency runs, 2 retirements)", checks)
	}
}

// TestSmokeConsumer runs the consumer workload at a tiny size (200
// deliveries at 1,000/s, so the inbox's target is measured, and 200 closed
// loop) and checks its series, ratios, target and checks: every event
// applied once, every answer 200, the sequencer's effects in order, the
// inbox emptied.
func TestSmokeConsumer(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped with -short: runs PostgreSQL and three receivers")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep := runJSON(ctx, t, "-workloads", "consumer", "-consumer-rates", "1000", "-consumer-duration", "200ms",
		"-consumer-senders", "4", "-consumer-closed", "4", "-reps", "1")
	paced, closed := consumerRateCase(1000), "closed loop, 4 senders"
	for _, sy := range consumerSystems {
		for _, c := range []struct{ cas, metric string }{{paced, "p50 ms"}, {paced, "p99 ms"}, {paced, "max ms"}, {paced, "sent/s"},
			{closed, "p50 ms"}, {closed, "deliveries/s"}} {
			if s := rep.find("consumer", c.cas, sy.sys, c.metric); s == nil || len(s.Values) != 1 || !(s.Median > 0) {
				t.Errorf("consumer %s %s %s: series %+v, want one positive value", c.cas, sy.sys, c.metric, s)
			}
		}
		for _, cas := range []string{paced, closed} {
			metrics := []string{mRecvCPU, mAllCPU, mGoCPU}
			if sy.kind == consumerInbox {
				metrics = append(metrics, mWorkCPU, "applied/s")
			}
			for _, m := range metrics {
				if s := rep.find("consumer", cas, sy.sys, m); s == nil || !(s.Median >= 0) || math.IsInf(s.Median, 0) {
					t.Errorf("consumer %s %s %s: series %+v, want a value ≥ 0", cas, sy.sys, m, s)
				}
			}
		}
		if s := rep.find("consumer", paced, sy.sys, "p99 ms"); s != nil {
			if p50 := rep.find("consumer", paced, sy.sys, "p50 ms"); p50 == nil || s.Median < p50.Median {
				t.Errorf("consumer %s: p99 %v below p50 %+v", sy.sys, s.Median, p50)
			}
		}
	}
	for _, q := range []struct{ cas, name string }{
		{paced, "sequencer / plain deduper, p50 ms"}, {paced, "sequencer / plain deduper, p99 ms"},
		{paced, "inbox / plain deduper, p50 ms"}, {paced, "inbox / plain deduper, p99 ms"},
		{closed, "sequencer / plain deduper, deliveries/s"}, {closed, "inbox / plain deduper, deliveries/s"},
	} {
		if r := rep.findRatio("consumer", q.cas, q.name); r == nil || !(r.Median > 0) {
			t.Errorf("consumer ratio %s %q: %+v", q.cas, q.name, r)
		}
	}
	// CPU ratios exist when the plain receiver's backends used a tick
	// (10 ms) of CPU, which 200 deliveries may not.
	for _, cas := range []string{paced, closed} {
		if s := rep.find("consumer", cas, sysPlainReceiver, mRecvCPU); s != nil && s.Median > 0 {
			if r := rep.findRatio("consumer", cas, "inbox / plain deduper, "+mRecvCPU); r == nil {
				t.Errorf("consumer %s: no receiver CPU ratio though the plain receiver's is %v", cas, s.Median)
			}
		}
	}
	if tg := findTarget(rep, "inbox receiver p99 ≤ 20 ms @1,000 deliveries/s"); tg == nil || !tg.Found || !(tg.Value > 0) || tg.Unit != "ms" {
		t.Errorf("inbox target: %+v, want it measured", tg)
	}
	want := map[string]string{sysPlainReceiver: "", sysSeqReceiver: "; 0 effects out of sequence order", sysInboxReceiver: "; inbox: 204 rows, 0 not applied, 0 dead-lettered"}
	checks := 0
	for _, c := range rep.Checks {
		if c.Workload != "consumer" {
			continue
		}
		checks++
		n := 204 // 200 measured, 4 warm-up
		if !c.OK || !strings.HasPrefix(c.Detail, fmt.Sprintf("%d effects rows for %d events, %d of the events among them; 0 answers not 200", n, n, n)) ||
			!strings.Contains(c.Detail, want[c.System]) {
			t.Errorf("consumer check %s %s: ok=%v %q", c.Case, c.System, c.OK, c.Detail)
		}
	}
	if checks != 2*len(consumerSystems) {
		t.Errorf("%d consumer checks, want %d", checks, 2*len(consumerSystems))
	}
}

// runJSON runs the harness with args and -json, and returns the report.
func runJSON(ctx context.Context, t *testing.T, args ...string) *Report {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(ctx, append(args, "-json"), nil, &stdout, &stderr); code != 0 {
		t.Fatalf("run %q exited %d:\n%s", args, code, stderr.String())
	}
	var rep Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("JSON output: %v\n%s", err, stdout.String())
	}
	return &rep
}

func findTarget(r *Report, name string) *Target {
	for i := range r.Targets {
		if r.Targets[i].Name == name {
			return &r.Targets[i]
		}
	}
	return nil
}

// showSetting reads one server setting.
func showSetting(ctx context.Context, t *testing.T, dsn, name string) string {
	t.Helper()
	pool, err := newPool(ctx, dsn, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var v string
	if err := pool.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// writeRecords writes one relay process's publish records.
func writeRecords(t *testing.T, dir string, proc int, recs ...[2]core.ID) {
	t.Helper()
	var b []byte
	for _, r := range recs {
		b = append(b, r[0][:]...)
		b = append(b, r[1][:]...)
	}
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("relay-%d.rec", proc)), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestCheckRecords makes sure the double-publish check can fail: each case
// plants one violation in otherwise clean records.
func TestCheckRecords(t *testing.T) {
	t.Parallel()
	e1, e2, e3 := core.NewID(), core.NewID(), core.NewID()
	l1, l2, l3 := core.NewID(), core.NewID(), core.NewID()
	ids := []core.ID{e1, e2, e3}
	cases := []struct {
		name    string
		procs   [][][2]core.ID
		pending int64
		ok      bool
		detail  string
	}{
		{"clean", [][][2]core.ID{{{e1, l1}, {e2, l1}}, {{e3, l2}}}, 0, true, "0 published more than once"},
		{"redelivered under a later lease", [][][2]core.ID{{{e1, l1}, {e2, l1}}, {{e3, l2}, {e1, l3}}}, 0, true, "1 published more than once (0 pairs under one lease, 1 pairs by two processes)"},
		{"twice under one lease", [][][2]core.ID{{{e1, l1}, {e2, l1}, {e1, l1}}, {{e3, l2}}}, 0, false, "(1 pairs under one lease"},
		{"one lease in two processes", [][][2]core.ID{{{e1, l1}, {e2, l1}}, {{e3, l1}}}, 0, false, "1 lease tokens seen in two processes"},
		{"never published", [][][2]core.ID{{{e1, l1}}, {{e3, l2}}}, 0, false, "1 never published"},
		{"without a lease", [][][2]core.ID{{{e1, l1}, {e2, {}}}, {{e3, l2}}}, 0, false, "1 publishes without a lease"},
		{"rows left pending", [][][2]core.ID{{{e1, l1}, {e2, l1}}, {{e3, l2}}}, 1, false, "1 rows pending"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			for p, recs := range c.procs {
				writeRecords(t, dir, p, recs...)
			}
			got, err := checkRecords(dir, len(c.procs), ids, c.pending)
			if err != nil {
				t.Fatal(err)
			}
			if got.OK != c.ok || !strings.Contains(got.Detail, c.detail) {
				t.Errorf("got ok=%v %q, want ok=%v and %q", got.OK, got.Detail, c.ok, c.detail)
			}
		})
	}
}

func TestRatiosAndTargets(t *testing.T) {
	t.Parallel()
	r := &Report{}
	for _, v := range [][3]float64{{30, 10, 50}, {36, 10, 50}, {27, 9, 60}} {
		r.add("drain", "batch=500", sysOutboxkit, "events/s", v[0])
		r.add("drain", "batch=500", sysWatermill, "events/s", v[1])
		r.add("drain", "batch=500", sysCeiling, "events/s", v[2])
	}
	if s := r.find("drain", "batch=500", sysOutboxkit, "events/s"); s.Median != 30 {
		t.Errorf("median of 30, 36, 27 = %v, want 30", s.Median)
	}
	// Ratios are taken per repetition (3, 3.6, 3), then the median.
	q := r.ratio("drain", "batch=500", "outboxkit / watermill", "events/s", sysOutboxkit, sysWatermill)
	if q == nil || q.Median != 3 {
		t.Fatalf("ratio %+v, want median 3", q)
	}
	r.target("≥ 3×", q.Median, true, ">=", 3, "×")
	c := r.ratio("drain", "batch=500", "outboxkit / SQL ceiling", "events/s", sysOutboxkit, sysCeiling)
	r.target("≥ 60 %", c.Median, true, ">=", 0.6, "×")
	r.target("≤ 2 ms", 2.5, true, "<=", 2, "ms")
	r.targetVersus("below River", 0.7, true, "<", 58, "ms", "River defaults")
	r.targetVersus("above River", 0.2, true, ">", 0.54, "×", "River defaults")
	r.targetVersus("River not run", 0, false, "<", 0, "ms", "River defaults")
	want := []bool{true, true, false, true, false, false}
	for i, tg := range r.Targets {
		if tg.Met != want[i] {
			t.Errorf("target %q: met=%v, want %v (value %v)", tg.Name, tg.Met, want[i], tg.Value)
		}
	}
	if got := r.Targets[2].Margin; got > -0.24 || got < -0.26 {
		t.Errorf("margin of 2.5 ms against ≤ 2 ms = %v, want -0.25", got)
	}
	var out bytes.Buffer
	r.writeTables(&out)
	for _, s := range []string{"| batch=500 | outboxkit | 30.0 (27.0–36.0) |", "**missed** by 25 %", "**met**, 0 % to spare",
		"| below River | 0.70 ms | < 58.0 ms (River defaults) | **met**, 99 % to spare |",
		"| above River | 0.20 × | > 0.54 × (River defaults) | **missed** by 63 % |",
		"| River not run | not run | < River defaults | – |"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("tables lack %q:\n%s", s, out.String())
		}
	}
}

func TestParseOptions(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	o, err := parseOptions([]string{"-workloads", "drain, write", "-batches", "50,500", "-reps", "5"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if !o.has("drain") || !o.has("write") || o.has("latency") || o.reps != 5 || len(o.batches) != 2 || o.batches[0] != 50 {
		t.Errorf("parsed %+v", o)
	}
	if o.soakParts != postgres.PartitionMinutes(5) {
		t.Errorf("-soak-partitions defaults to %v, want 5m", o.soakParts)
	}
	if o, err := parseOptions([]string{"-soak-partitions", "hourly"}, &stderr); err != nil || o.soakParts != postgres.PartitionHourly {
		t.Errorf("-soak-partitions hourly: %v, %v", o, err)
	}
	for _, bad := range [][]string{{"-workloads", "soak"}, {"-batches", "0"}, {"-reps", "0"}, {"extra"},
		{"-river-workers", "0"}, {"-river-cooldown", "0s"}, {"-river-cooldown", "20ms", "-river-poll", "10ms"},
		{"-idle-duration", "500ms"}, {"-growth-retained", "0"}, {"-growth-events", "-1"},
		{"-workloads", "growth", "-events", "5000", "-growth-events", "5000"},
		{"-consumer-rates", "0"}, {"-consumer-duration", "0s"}, {"-consumer-closed", "0"}, {"-consumer-senders", "0"},
		{"-consumer-rates", "1", "-consumer-duration", "500ms"},
		{"-soak-partitions", "7m"}, {"-soak-partitions", "none"}} {
		if _, err := parseOptions(bad, &stderr); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
