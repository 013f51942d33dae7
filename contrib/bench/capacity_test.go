package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

// TestSizing runs the sizing command's short measurements against the
// local PostgreSQL, as a user runs `go run ./contrib/bench -sizing`, and
// checks that it printed a prediction with every field the model gives and
// values a 2-core test machine can produce. It is what `make test` runs of
// the capacity mode; the prediction is in the test's log (go test -v).
func TestSizing(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped with -short: measures against PostgreSQL for about 20 s")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"-sizing", "-json", "-cores", "16", "-cpu-share", "0.25", "-events-per-second", "20000", "-retention", "24h"}, nil, &stdout, &stderr)
	// The short mode is meant to run in under a minute, but how long it
	// takes is a speed figure of a shared machine (the package's other
	// smoke tests run beside it), not a property to test: logged only.
	elapsed := time.Since(start)
	t.Logf("sizing took %s; its report:\n%s", elapsed.Round(time.Millisecond), stderr.String())
	if code != 0 {
		t.Fatalf("-sizing exited %d", code)
	}
	var rep CapacityReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("JSON output: %v\n%s", err, stdout.String())
	}
	if !rep.Modelled || rep.Mode != "sizing" || !rep.Server.Local {
		t.Fatalf("report: modelled %v, mode %q, PostgreSQL local %v; notes %q", rep.Modelled, rep.Mode, rep.Server.Local, rep.Notes)
	}
	// The local server's role is a superuser: the WAL must have been read
	// record by record, not taken from the whole server's.
	if !strings.HasPrefix(rep.Server.WAL, "WAL: pg_walinspect") {
		t.Errorf("WAL method %q, want pg_walinspect", rep.Server.WAL)
	}
	for _, want := range []string{"### Prediction", "max events/s:", "at 20,000 events/s", "relays:", "WAL:", "table under 24 h retention:", "| 16 |"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("the printed report lacks %q", want)
		}
	}
	in := rep.Inputs
	// Each input in a range a real PostgreSQL on any machine gives, wide
	// enough for a loaded one and the race detector, narrow enough that a
	// unit mistake (ns for µs, per batch for per event) falls outside.
	for _, c := range []struct {
		name     string
		v        float64
		min, max float64
	}{
		{"PostgreSQL µs per event written", in.WritePG, 1, 5000},
		{"WAL bytes per event written", in.WriteWAL, 100, 5000},
		// About 1 (1.06 on a quiet machine, 1.14 under make test's load).
		{"round trips per Add", in.AddRoundTrips, 0.9, 1.3},
		{"relay PostgreSQL µs per event at full batches of 100", in.RelayEventPG + in.RelayRoundPG/100, 0.5, 1000},
		{"relay PostgreSQL µs per claim round", in.RelayRoundPG, 5, 20000},
		{"relay WAL bytes per event", in.RelayEventWAL + in.RelayRoundWAL/100, 100, 5000},
		{"round trips per full batch", in.RoundTripsFull, 0.9, 3},
		{"empty claim µs", in.EmptyClaimPG, 1, 5000},
		{"heap bytes per kept event", in.HeapBytes, 50, 10000},
		{"index bytes per kept event", in.IndexBytes, 10, 5000},
		{"Deduper.Once µs", in.DedupePG, 5, 20000},
		{"Sequencer.OnceInOrder µs", in.SequencerPG, 5, 20000},
		{"Inbox.Accept µs", in.AcceptPG, 5, 20000},
		{"inbox worker µs", in.InboxWorkerPG, 5, 50000},
		{"prune µs per event", in.PrunePG, 0.1, 1000},
	} {
		if !(c.v >= c.min && c.v <= c.max) {
			t.Errorf("%s = %v, want within [%v, %v]", c.name, c.v, c.min, c.max)
		}
	}
	if w, ok := in.Wakeups[rep.Wakeup]; !ok || w.Runs != 1 {
		t.Errorf("wake-up %s: %+v, want one paced run", rep.Wakeup, w)
	}
	p := rep.Prediction
	if p.Scenario.Cores != 16 || p.Scenario.CPUShare != 0.25 || p.Scenario.RetentionHours != 24 {
		t.Errorf("scenario %+v, want the flags' 16 cores, 0.25 share, 24 h", p.Scenario)
	}
	// 4 cores of PostgreSQL sustain more than a few hundred events/s and
	// fewer than ten million on any hardware.
	if !(p.MaxRate > 300 && p.MaxRate < 1e7) || p.MaxRelays < 1 {
		t.Errorf("max %v events/s with %d relays, want a sane maximum", p.MaxRate, p.MaxRelays)
	}
	a := p.At
	if a == nil {
		t.Fatal("no prediction at -events-per-second")
	}
	if a.Rate != 20000 || !(a.Cores > 0) || a.Relays < 2 || a.Connections < a.Relays*3 || !(a.WALGiBPerDay > 0) || !(a.TableGiB > 0) || !(a.RowsKept == 20000*86400) {
		t.Errorf("at 20,000 events/s: %+v", a)
	}
	if a.Fits != (a.Rate <= p.MaxRate) {
		t.Errorf("at 20,000 events/s fits=%v, but the maximum is %v", a.Fits, p.MaxRate)
	}
	if len(rep.Examples) != 3 || !(rep.Examples[0].MaxRate < rep.Examples[1].MaxRate && rep.Examples[1].MaxRate < rep.Examples[2].MaxRate) {
		t.Errorf("worked examples for 2, 16 and 64 cores: %+v", rep.Examples)
	}
}

// TestModel checks the model's formulas on fixed inputs: full batches
// cost what the drains measured, batches grow with the rate as core.Relay
// paces its claims, relays follow the relay CPU and latency, WAL and the
// table's size follow the rate and the retention.
func TestModel(t *testing.T) {
	t.Parallel()
	in := &Inputs{
		WritePG: 50, WriteWAL: 400,
		RelayRoundPG: 150, RelayEventPG: 5, RelayRoundGo: 100, RelayEventGo: 2, RelayRoundWAL: 50, RelayEventWAL: 700,
		RelayRoundMs: 1, RelayEventMs: 0.01, EmptyClaimPG: 40,
		Wakeups: map[string]WakeupCost{
			"wal":  {TauMs: 2, Looks: 0.5, RoundPG: 400, Runs: 1},
			"poll": {TauMs: 1, PollRate: 1000, RoundPG: 400, Runs: 1},
		},
		WalsenderPerEvent: 20, WalsenderPerKiB: 3,
		VacuumPG: 3, PrunePG: 3, PruneVacuumPG: 3, VacuumWAL: 30, PruneWAL: 300, PruneVacuumWAL: 40,
		HeapBytes: 700, IndexBytes: 200, BloatedBytes: 900, Background: 0.05, BackgroundMeasured: true,
		Transports: map[string]TransportCost{transportNoop: {}},
	}
	s := Scenario{Cores: 16, CPUShare: 0.5, Rate: 50000, RetentionHours: 24, Wakeup: "wal"}.WithDefaults()
	// At 50,000 events/s over 2 relays (1 needed, 1 more) each sees 25,000/s:
	// full batches of 100, the drains' cost.
	at := in.At(s, 50000)
	if at.Relays != 2 || at.Batch != 100 {
		t.Fatalf("relays %d, batch %v; want 2 and 100", at.Relays, at.Batch)
	}
	if got, want := at.RelayPG, 5+150.0/100; math.Abs(got-want) > 1e-9 {
		t.Errorf("relay PG at full batches %v, want %v", got, want)
	}
	// 50,000 commits/s pause the streams (they would run 1/11 of the
	// time), and so do the 70 MiB/s of WAL they write: 5 s a minute.
	if math.Abs(at.StreamDuty-5.0/65) > 1e-9 {
		t.Errorf("stream duty %v, want 5/65", at.StreamDuty)
	}
	if d := streamDuty(3000, 1); math.Abs(d-1.0/11) > 1e-9 {
		t.Errorf("stream duty at 3,000 commits/s and 1 MiB/s: %v, want 1/11", d)
	}
	wal := 400 + 700 + 50.0/100 + 30 + 300 + 40
	if math.Abs(at.WALPerEvent-wal) > 1e-9 || math.Abs(at.WALGiBPerDay-50000*86400*wal/(1<<30)) > 1e-6 {
		t.Errorf("WAL %v B/event, %v GiB/day; want %v", at.WALPerEvent, at.WALGiBPerDay, wal)
	}
	if math.Abs(at.TableGiB-50000*86400*900.0/(1<<30)) > 1e-6 {
		t.Errorf("table %v GiB", at.TableGiB)
	}
	// Below paceFrom a WAL-woken relay claims rate × tau events at a time,
	// at least one, with half an empty look per claim.
	one := Scenario{Cores: 2, CPUShare: 1, Wakeup: "wal", Relays: 1}.WithDefaults()
	pg, b, duty := in.relayPG(one, 1000, 1000, 0)
	if b != 2 || duty != 1 {
		t.Errorf("at 1,000/s: %v events per claim, duty %v; want 2 and 1", b, duty)
	}
	if want := 5 + (400*500+40*250)/1000.0; math.Abs(pg-want) > 1e-9 {
		t.Errorf("relay PG at 1,000/s: %v, want %v", pg, want)
	}
	// A WAL stream that runs costs its relay's WAL sender per event, and
	// per KiB of the database's other WAL.
	if at := in.At(one, 1000); at.StreamDuty != 1 || math.Abs(at.WalsenderPG-20) > 1e-9 {
		t.Errorf("at 1,000/s, one relay: duty %v, WAL sender %v µs per event; want 1 and 20", at.StreamDuty, at.WalsenderPG)
	}
	other := one
	other.OtherWALMiBps = 1
	if at := in.At(other, 1000); math.Abs(at.WalsenderPG-(20+3*1024/1000.0)) > 1e-9 {
		t.Errorf("with 1 MiB/s of other WAL: WAL sender %v µs per event, want %v", at.WalsenderPG, 20+3*1024/1000.0)
	}
	// From paceFrom the claims are spaced by a µs per event per second:
	// 3,000/s gather 9 per claim (more than the 6 of tau).
	if _, b, _ := in.relayPG(one, 3000, 1000, 0); math.Abs(b-9) > 1e-9 {
		t.Errorf("at 3,000/s: %v events per claim, want 9", b)
	}
	// A polling relay looks PollRate times a second whatever it finds.
	poll := Scenario{Cores: 2, CPUShare: 1, Wakeup: "poll", Relays: 1}.WithDefaults()
	if pg, b, _ := in.relayPG(poll, 200, 200, 0); b != 1 || math.Abs(pg-(5+(400*200+40*800)/200.0)) > 1e-9 {
		t.Errorf("polling at 200/s: %v µs per event, %v per claim", pg, b)
	}
	// The maximum fits the share and a little more does not; more cores
	// sustain more.
	p := in.Predict(s)
	if !(p.MaxRate > 0) || !in.At(s, p.MaxRate).Fits || in.At(s, p.MaxRate*1.02).Fits {
		t.Errorf("max %v: fits %v, 2 %% more fits %v", p.MaxRate, in.At(s, p.MaxRate).Fits, in.At(s, p.MaxRate*1.02).Fits)
	}
	s64 := s
	s64.Cores = 64
	if p64 := in.Predict(s64); !(p64.MaxRate > 3*p.MaxRate) {
		t.Errorf("64 cores sustain %v, 16 cores %v: want more than three times", p64.MaxRate, p.MaxRate)
	}
	// Relays: a rate whose relay CPU needs three relay processes of a
	// tenth of a core each at half utilisation gets three, and one more.
	thin := s
	thin.RelayCores = 0.1
	cpu := in.relayCPU(100, transportNoop) // 3 µs per event
	rate := 3 * 0.1 * 0.5 * 1e6 / cpu * 0.999
	if got := in.At(thin, rate); got.RelaysNeeded != 3 || got.Relays != 4 {
		t.Errorf("at %v events/s: %d relays needed, %d planned; want 3 and 4", rate, got.RelaysNeeded, got.Relays)
	}
}

// TestFitLine checks the WAL sender's fit: CPU a second against the rate.
func TestFitLine(t *testing.T) {
	t.Parallel()
	if s, i := fitLine([]float64{250, 500, 1000}, []float64{35500, 53000, 88000}); math.Abs(s-70) > 1e-6 || math.Abs(i-18000) > 1e-3 {
		t.Errorf("fit: %v per event + %v a second, want 70 and 18,000", s, i)
	}
	// One rate: all of it per event.
	if s, i := fitLine([]float64{500, 500}, []float64{60000, 60000}); s != 120 || i != 0 {
		t.Errorf("one rate: %v + %v, want 120 + 0", s, i)
	}
}

// TestFitInverse checks the fit of y = v + f/x that splits a cost into
// its per-round and per-event parts.
func TestFitInverse(t *testing.T) {
	t.Parallel()
	xs := []float64{1, 10, 100, 500}
	var ys []float64
	for _, x := range xs {
		ys = append(ys, 4+150/x)
	}
	v, f, e := fitInverse(xs, ys)
	if math.Abs(v-4) > 1e-6 || math.Abs(f-150) > 1e-6 || e > 1e-9 {
		t.Errorf("fit of 4 + 150/x: %v + %v/x, worst error %v", v, f, e)
	}
	// A point 10 % off shows in the worst error.
	ys[2] *= 1.1
	if _, _, e := fitInverse(xs, ys); e < 0.02 {
		t.Errorf("worst error %v with a point 10 %% off", e)
	}
}
