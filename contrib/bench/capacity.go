package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/postgres"
)

// The capacity mode (-capacity) measures the per-event costs that decide
// how far one PostgreSQL primary goes, for each wake-up mode, batch size
// and transport, and the consumer side's; the sizing mode (-sizing) runs a
// short version of the same against the user's DATABASE_URL and prints
// the model's prediction for -cores, -cpu-share and -events-per-second.
// docs/SCALING.md is the model, its inputs as measured on the project's
// machine, and its validation.
//
//	go run ./contrib/bench -sizing -cores 16 -cpu-share 0.25 -events-per-second 20000
//	go run ./contrib/bench -capacity -json > capacity.json
//	go run ./contrib/bench -capacity-inputs capacity.json -cores 64   # the model again, no measuring

// capConfig is the capacity mode's configuration.
type capConfig struct {
	dsn         string
	capacity    bool // the full measurements
	sizing      bool // the short ones
	inputsFile  string
	against     string
	short       bool
	reps        int
	batches     []int
	wakeups     []string
	rates       []int
	transports  []string
	tBatch      int
	natsURL     string
	capWriters  int
	capWriteFor time.Duration
	capPacedFor time.Duration
	saturate    time.Duration
	satWriters  int
	walInspect  bool
	scenario    Scenario
	verbose     bool
	jsonOut     bool
	only        []string
	// layouts of the outbox table measured: the plain one always, and with
	// -capacity the hourly partitioned layout too (writes, a drain at the
	// transports' batch size, retention by dropping partitions).
	layouts []postgres.Partitioning
}

// capTransports are the transports the capacity mode drains through.
var capTransports = []string{transportNoop, transportQStash, transportNATS, capKafka}

// capPhases are the capacity mode's measurements.
var capPhases = []string{"write", "empty", "drain", "paced", "consumer", "retention", "saturate"}

// runs says whether measurement p is to run.
func (o *capConfig) runs(p string) bool { return len(o.only) == 0 || slices.Contains(o.only, p) }

// capFlags are the flags' raw values.
type capFlags struct {
	capacity, sizing, walInspect, colocated        bool
	partitioned                                    bool
	inputs, batches, wakeups, rates, transports    string
	only, against                                  string
	reps, tBatch, writers, satWriters, relays      int
	batch, concurrency                             int
	cores, share, rate, avgRate, relayCores, pubMs float64
	otherWAL                                       float64
	writeFor, pacedFor, saturate, retention        time.Duration
	natsURL, wakeup, transport, layout             string
}

// registerCapacityFlags adds the capacity mode's flags to fs.
func registerCapacityFlags(fs *flag.FlagSet) *capFlags {
	f := &capFlags{}
	fs.BoolVar(&f.capacity, "capacity", false, "measure the per-event costs of the capacity model (every wake-up mode, batch size and transport, the consumer side) and print the model (docs/SCALING.md); takes a few minutes")
	fs.BoolVar(&f.sizing, "sizing", false, "the short capacity measurements (under a minute) against -dsn, then the model's prediction for -cores, -cpu-share and -events-per-second")
	fs.StringVar(&f.inputs, "capacity-inputs", "", "a `file` of -capacity or -sizing JSON output: print the model's prediction from its measurements, measuring nothing")
	fs.StringVar(&f.against, "capacity-against", "", "with -capacity-inputs: a `file` of another run's JSON output whose saturation runs the inputs' model predicts (the validation across core counts)")
	fs.Float64Var(&f.cores, "cores", float64(runtime.NumCPU()), "sizing: the database server's cores")
	fs.Float64Var(&f.share, "cpu-share", 0.5, "sizing: the share of those cores the outbox may use (writes, relaying, retention)")
	fs.Float64Var(&f.rate, "events-per-second", 0, "sizing: the peak rate to size for (0: only the most the share sustains)")
	fs.Float64Var(&f.avgRate, "avg-events-per-second", 0, "sizing: the average rate, for WAL per day and the table's size (0: -events-per-second)")
	fs.DurationVar(&f.retention, "retention", 7*24*time.Hour, "sizing: how long published events are kept (postgres.RetentionConfig.RetainPublished)")
	fs.StringVar(&f.wakeup, "wakeup", "", "sizing: the relays' wake-up, wal, listen or poll (default: wal where the server allows logical replication, else listen)")
	fs.StringVar(&f.layout, "layout", "plain", "sizing: the outbox table's layout, plain, hourly or daily (partitions retired whole instead of rows pruned; measured with -capacity on the hourly layout)")
	fs.StringVar(&f.transport, "transport", transportNoop, "sizing: the relays' transport, for their CPU and publish time: noop, qstashdev, nats or kafka (measured with -capacity-transports)")
	fs.Float64Var(&f.pubMs, "publish-ms", 0, "sizing: a publish's round trip in ms (a remote QStash or broker; 0: the measured local one)")
	fs.Float64Var(&f.otherWAL, "database-wal-mib-per-s", 0, "sizing: the database's WAL besides the outbox's, MiB/s, which every relay's WAL stream decodes too")
	fs.Float64Var(&f.relayCores, "relay-cores", 1, "sizing: cores of each relay process")
	fs.IntVar(&f.batch, "batch", 100, "sizing: the relays' batch size (core.RelayConfig.BatchSize)")
	fs.IntVar(&f.concurrency, "concurrency", 2, "sizing: the relays' concurrency (core.RelayConfig.Concurrency)")
	fs.IntVar(&f.relays, "relays", 0, "sizing: relay processes (0: as many as the rate needs, plus one)")
	fs.BoolVar(&f.colocated, "colocated", false, "sizing: the writers and the relay run on the database's cores too (the validation's setting)")
	fs.StringVar(&f.only, "capacity-only", "", "capacity: run only these measurements, of write, empty, drain, paced, consumer, retention, saturate (default all; saturate only with -capacity-saturate)")
	fs.BoolVar(&f.partitioned, "capacity-partitioned", true, "capacity: also measure the hourly partitioned layout (postgres.MigrateConfig.Partitions): writes, a drain, retention by dropping partitions")
	fs.IntVar(&f.reps, "capacity-reps", 0, "capacity: repetitions of every measurement, medians taken (0: 3 with -capacity, 1 with -sizing)")
	fs.StringVar(&f.batches, "capacity-batches", "", "capacity: relay batch sizes drained (default 1,10,100,500; -sizing 1,100)")
	fs.StringVar(&f.wakeups, "capacity-wakeups", "", "capacity: wake-up modes of the paced runs, of wal, listen, poll (default all; -sizing the server's default)")
	fs.StringVar(&f.rates, "capacity-rates", "", "capacity: events/s of the paced runs (default 500,3000; -sizing 1000)")
	fs.StringVar(&f.transports, "capacity-transports", "", "capacity: transports drained, of noop, qstashdev, nats, kafka (default all; -sizing noop)")
	fs.IntVar(&f.tBatch, "capacity-transport-batch", 100, "capacity: batch size of the qstashdev and nats drains")
	fs.StringVar(&f.natsURL, "nats-url", "nats://127.0.0.1:4222", "capacity: NATS server with JetStream, for the nats transport")
	fs.IntVar(&f.writers, "capacity-writers", 4, "capacity: concurrent writers and consumer callers")
	fs.DurationVar(&f.writeFor, "capacity-write-duration", 0, "capacity: length of each writer measurement (default 4s; -sizing 1s)")
	fs.DurationVar(&f.pacedFor, "capacity-paced-duration", 0, "capacity: length of each paced run (default 5s; -sizing 1.5s)")
	fs.DurationVar(&f.saturate, "capacity-saturate", 0, "capacity: also run writers and a relay flat out for this long, for the model's validation (0: not)")
	fs.IntVar(&f.satWriters, "capacity-saturate-writers", 8, "capacity: writers of the saturation run")
	fs.BoolVar(&f.walInspect, "wal-inspect", true, "capacity: install pg_walinspect (schema "+walInspectSchema+") when it is missing, to count each measurement's own WAL; without it WAL is the whole server's")
	return f
}

// config validates the flags; nil when no capacity mode was asked for.
func (f *capFlags) config(o *options) (*capConfig, error) {
	if !f.capacity && !f.sizing && f.inputs == "" {
		return nil, nil
	}
	if n := btoi(f.capacity) + btoi(f.sizing) + btoi(f.inputs != ""); n > 1 {
		return nil, errors.New("-capacity, -sizing and -capacity-inputs are alternatives: give one")
	}
	if f.against != "" && f.inputs == "" {
		return nil, errors.New("-capacity-against goes with -capacity-inputs")
	}
	c := &capConfig{dsn: o.dsn, capacity: f.capacity, sizing: f.sizing, inputsFile: f.inputs, against: f.against, short: f.sizing,
		tBatch: f.tBatch, natsURL: f.natsURL, capWriters: f.writers, saturate: f.saturate, satWriters: f.satWriters,
		walInspect: f.walInspect, verbose: o.verbose, jsonOut: o.jsonOut}
	def := func(full, short string, v string) string {
		switch {
		case v != "":
			return v
		case c.short:
			return short
		}
		return full
	}
	var err error
	if c.batches, err = intList("capacity-batches", def("1,10,100,500", "1,100", f.batches)); err != nil {
		return nil, err
	}
	if c.rates, err = intList("capacity-rates", def("500,3000", "1000", f.rates)); err != nil {
		return nil, err
	}
	c.wakeups = splitList(def("wal,listen,poll", "default", f.wakeups))
	for _, w := range c.wakeups {
		if _, ok := capWakeups[w]; !ok && w != "default" {
			return nil, fmt.Errorf("-capacity-wakeups: unknown wake-up %q (wal, listen, poll)", w)
		}
	}
	c.transports = splitList(def(strings.Join(capTransports, ","), transportNoop, f.transports))
	for _, t := range c.transports {
		if !slices.Contains(capTransports, t) {
			return nil, fmt.Errorf("-capacity-transports: unknown transport %q (%s)", t, strings.Join(capTransports, ", "))
		}
	}
	c.layouts = []postgres.Partitioning{postgres.PartitionNone}
	if !c.short && f.partitioned {
		c.layouts = append(c.layouts, postgres.PartitionHourly)
	}
	c.only = splitList(f.only)
	for _, p := range c.only {
		if !slices.Contains(capPhases, p) {
			return nil, fmt.Errorf("-capacity-only: unknown measurement %q (%s)", p, strings.Join(capPhases, ", "))
		}
	}
	c.reps = f.reps
	if c.reps == 0 {
		c.reps = map[bool]int{true: 1, false: 3}[c.short]
	}
	c.capWriteFor, c.capPacedFor = f.writeFor, f.pacedFor
	if c.capWriteFor == 0 {
		c.capWriteFor = map[bool]time.Duration{true: 700 * time.Millisecond, false: 4 * time.Second}[c.short]
	}
	if c.capPacedFor == 0 {
		c.capPacedFor = map[bool]time.Duration{true: time.Second, false: 5 * time.Second}[c.short]
	}
	switch {
	case c.reps < 1 || c.capWriters < 1 || c.satWriters < 1 || c.tBatch < 1:
		return nil, errors.New("-capacity-reps, -capacity-writers, -capacity-saturate-writers and -capacity-transport-batch must be at least 1")
	case c.capWriteFor <= 0 || c.capPacedFor <= 0 || c.saturate < 0:
		return nil, errors.New("-capacity-write-duration and -capacity-paced-duration must be positive, -capacity-saturate not negative")
	case f.cores <= 0 || f.share <= 0 || f.share > 1:
		return nil, fmt.Errorf("-cores must be positive and -cpu-share in (0, 1]: got %v and %v", f.cores, f.share)
	case f.batch < 1 || f.concurrency < 1:
		return nil, errors.New("-batch and -concurrency must be at least 1")
	case f.rate < 0 || f.avgRate < 0 || f.otherWAL < 0 || f.retention < 0 || f.relayCores <= 0 || f.relays < 0 || f.pubMs < 0:
		return nil, errors.New("-events-per-second, -avg-events-per-second, -retention, -relays and -publish-ms must not be negative, -relay-cores positive")
	case f.wakeup != "" && capWakeups[f.wakeup].want == "":
		return nil, fmt.Errorf("-wakeup %q: use wal, listen or poll", f.wakeup)
	case f.layout != "plain" && f.layout != "hourly" && f.layout != "daily":
		return nil, fmt.Errorf("-layout %q: use plain, hourly or daily", f.layout)
	case !slices.Contains(capTransports, f.transport):
		return nil, fmt.Errorf("-transport %q: use one of %s", f.transport, strings.Join(capTransports, ", "))
	}
	c.scenario = Scenario{layout: f.layout, Cores: f.cores, CPUShare: f.share, Rate: f.rate, AvgRate: f.avgRate, RetentionHours: f.retention.Hours(),
		Wakeup: f.wakeup, Transport: f.transport, PublishMs: f.pubMs, OtherWALMiBps: f.otherWAL, Batch: f.batch, Concurrency: f.concurrency, RelayCores: f.relayCores, Relays: f.relays, Colocated: f.colocated}
	return c, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// CapacityReport is everything a capacity or sizing run measured, the
// inputs derived from it and the model's predictions.
type CapacityReport struct {
	Mode       string          `json:"mode"`
	Started    string          `json:"started"`
	Args       []string        `json:"args"`
	Env        Env             `json:"env"`
	Server     CapServer       `json:"server"`
	Write      []CapWrite      `json:"write,omitempty"`
	Drains     []CapDrain      `json:"drains,omitempty"`
	Empty      []CapEmpty      `json:"empty_claims,omitempty"`
	Paced      []CapPaced      `json:"paced,omitempty"`
	Consumer   []CapConsumer   `json:"consumer,omitempty"`
	Retention  []CapRetention  `json:"retention,omitempty"`
	Saturation []CapSaturation `json:"saturation,omitempty"`
	// Inputs are the model's, for the wake-up Wakeup.
	Wakeup string `json:"wakeup"`
	Inputs Inputs `json:"inputs"`
	// PacedCheck compares each paced run's relay cost with the model's.
	PacedCheck []PacedCheck `json:"paced_check,omitempty"`
	// Prediction is for the flags' scenario; Examples for 2, 16 and 64
	// cores; SaturationCheck the model against the saturation runs.
	Prediction      Prediction       `json:"prediction"`
	Examples        []Prediction     `json:"examples"`
	SaturationCheck *SaturationCheck `json:"saturation_check,omitempty"`
	Notes           []string         `json:"notes,omitempty"`
	// Modelled is false when the measurements stopped before the model
	// could be built.
	Modelled    bool    `json:"modelled"`
	WallSeconds float64 `json:"wall_seconds"`
}

// CapServer describes the server measured.
type CapServer struct {
	// Local: the backends are processes of this host (their CPU time is
	// readable); without it there are no CPU figures.
	Local     bool   `json:"local"`
	WALLevel  string `json:"wal_level"`
	WALStream bool   `json:"wal_stream_possible"`
	WAL       string `json:"wal_method"`
	// BackgroundShare is the background processes' CPU over the measured
	// backends', over the measurements during which nobody else used the
	// server (BackgroundAttributable; OtherPhases counts the others).
	BackgroundShare        float64 `json:"background_share"`
	BackgroundAttributable bool    `json:"background_attributable"`
	QuietPhases            int     `json:"quiet_phases"`
	OtherPhases            int     `json:"busy_phases"`
}

// PacedCheck is a paced run against the model's relay cost at its rate.
type PacedCheck struct {
	Wakeup    string  `json:"wakeup"`
	Rate      int     `json:"rate"`
	Measured  float64 `json:"relay_pg_us_per_event"`
	Predicted float64 `json:"model_relay_pg_us_per_event"`
	Batch     float64 `json:"measured_events_per_claim"`
	ModelB    float64 `json:"model_events_per_claim"`
}

// SaturationCheck is the model's prediction of the saturation runs, from
// this run's own inputs (the cross-core predictions take -capacity-inputs
// from another run).
type SaturationCheck struct {
	Cores     float64 `json:"cores"`
	Measured  float64 `json:"measured_events_per_second"`
	Predicted float64 `json:"predicted_events_per_second"`
	// PredictedObtained scales the prediction to the CPU the run obtained.
	PredictedObtained float64 `json:"predicted_at_obtained_cpu"`
	Error             float64 `json:"error"`
	ErrorObtained     float64 `json:"error_at_obtained_cpu"`
	// The database's side alone: PostgreSQL CPU per event (backends and
	// background processes) measured in the saturation run, and the
	// model's at the rate it sustained. This is the part that sizes a
	// primary; the rest of the throughput's error is the writers' and the
	// relay's own CPU on the same cores.
	MeasuredPG  float64 `json:"measured_pg_us_per_event"`
	PredictedPG float64 `json:"predicted_pg_us_per_event"`
	ErrorPG     float64 `json:"error_pg"`
	MeasuredGo  float64 `json:"measured_go_us_per_event"`
	PredictedGo float64 `json:"predicted_go_us_per_event"`
}

// capRun is one capacity run.
type capRun struct {
	o         *capConfig
	admin     *pgxpool.Pool
	wal       *walProbe
	rep       *CapacityReport
	log       io.Writer
	schemas   []string
	walStream bool
	// background attribution
	bgSum, oursSum time.Duration
}

func (c *capRun) logf(format string, args ...any) {
	fmt.Fprintf(c.log, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// noteLocal records whether the server's backends are readable.
func (c *capRun) noteLocal(p *capPool) {
	if p.local() {
		c.rep.Server.Local = true
	}
}

// server records a phase's background CPU beside the backends' it
// measured (ours), when nobody else used the server meanwhile.
func (c *capRun) server(s serverSample, ours time.Duration) {
	if !s.ok || ours <= 0 {
		return
	}
	// Clients beyond ours: the admin connection's queries and anyone
	// else's.
	if others := s.clients - ours; others > ours/10 {
		c.rep.Server.OtherPhases++
		return
	}
	c.rep.Server.QuietPhases++
	c.bgSum += s.background
	c.oursSum += ours
}

// runCapacity is the -capacity, -sizing and -capacity-inputs modes.
func runCapacity(ctx context.Context, o *capConfig, args []string, stdout, stderr io.Writer) int {
	started := time.Now()
	var rep *CapacityReport
	var err error
	if o.inputsFile != "" {
		rep, err = loadCapacityReport(o.inputsFile)
		if err == nil && o.against != "" {
			var other *CapacityReport
			if other, err = loadCapacityReport(o.against); err == nil {
				if len(other.Saturation) == 0 {
					err = fmt.Errorf("%s has no saturation run (-capacity-saturate)", o.against)
				}
				rep.Saturation = other.Saturation
				rep.Notes = append(rep.Notes, fmt.Sprintf("the saturation runs are %s's, predicted from %s's inputs", o.against, o.inputsFile))
			}
		}
		if err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 1
		}
	} else {
		rep, err = measureCapacity(ctx, o, args, stderr)
	}
	if rep == nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	if err == nil {
		model(rep, o)
	} else {
		rep.Notes = append(rep.Notes, "the measurements stopped early ("+err.Error()+"): no prediction")
	}
	if o.inputsFile == "" {
		rep.WallSeconds = time.Since(started).Seconds()
	}
	out := stdout
	if o.jsonOut {
		out = stderr
	}
	rep.writeText(out, o)
	if o.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if jerr := enc.Encode(rep); jerr != nil && err == nil {
			err = jerr
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	return 0
}

func loadCapacityReport(path string) (*CapacityReport, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r CapacityReport
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	r.Mode = "inputs from " + path + " (measured " + r.Started + ")"
	return &r, nil
}

// model derives the inputs and the predictions.
func model(rep *CapacityReport, o *capConfig) {
	wakeup := o.scenario.Wakeup
	if wakeup == "" {
		wakeup = "listen"
		if rep.Server.WALStream {
			wakeup = "wal"
		}
	}
	rep.Wakeup = wakeup
	rep.Modelled = true
	layout := o.scenario.layout
	if layout == "" {
		layout = "plain"
	}
	in, notes := buildLayoutInputs(rep, wakeup, layout)
	rep.Inputs = in
	rep.Notes = append(rep.Notes, notes...)
	s := o.scenario
	s.Wakeup = wakeup
	rep.Prediction = in.Predict(s)
	rep.Examples = nil
	for _, cores := range []float64{2, 16, 64} {
		ex := s
		ex.Cores, ex.CPUShare, ex.Colocated, ex.Relays = cores, 0.5, false, 0
		rep.Examples = append(rep.Examples, in.Predict(ex))
	}
	rep.PacedCheck = nil
	for _, p := range rep.Paced {
		ps := Scenario{Wakeup: p.Wakeup}.WithDefaults()
		rate := p.reached()
		// The paced run's own server WAL, which its WAL sender decoded.
		dbWAL := p.ServerWALKiB / 1024 / (float64(p.Events) / math.Max(p.Reached, 1))
		pg, b, duty := in.relayPG(ps, rate, rate, dbWAL)
		if p.Wakeup == "wal" && p.WakeupSeen == wakeupWAL {
			other := math.Max(0, p.ServerWALKiB-float64(p.Events)*in.pacedWALPerEvent(p)/1024)
			secs := float64(p.Events) / rate
			pg += duty * in.walsenderAt(rate, other/secs)
		}
		rep.PacedCheck = append(rep.PacedCheck, PacedCheck{Wakeup: p.Wakeup, Rate: p.Rate, Measured: p.PGPerEv, Predicted: pg, Batch: p.EventsPerClaim, ModelB: b})
	}
	rep.SaturationCheck = nil
	if len(rep.Saturation) > 0 {
		sat := rep.Saturation
		cores := float64(len(sat[0].CPUs))
		sc := Scenario{Cores: cores, CPUShare: 1, Wakeup: wakeup, Relays: 1, Colocated: true}
		pred := in.Predict(sc).MaxRate
		meas := medianOf(sat, func(x CapSaturation) float64 { return x.Sustained })
		obtained := medianOf(sat, func(x CapSaturation) float64 { return x.Obtained })
		pc := &SaturationCheck{Cores: cores, Measured: meas, Predicted: pred}
		if obtained > 0 {
			sc.Cores = obtained
			pc.PredictedObtained = in.Predict(sc).MaxRate
			pc.ErrorObtained = meas/pc.PredictedObtained - 1
		}
		if pred > 0 {
			pc.Error = meas/pred - 1
		}
		pc.MeasuredPG = medianOf(sat, func(x CapSaturation) float64 { return x.PGPerEv + x.BackgroundPerEv })
		pc.MeasuredGo = medianOf(sat, func(x CapSaturation) float64 { return x.GoPerEv })
		at := in.At(Scenario{Cores: cores, CPUShare: 1, Wakeup: wakeup, Relays: 1, Colocated: true}, meas)
		pc.PredictedPG, pc.PredictedGo = at.PerEventUs-at.ColocatedGo, at.ColocatedGo
		if pc.PredictedPG > 0 {
			pc.ErrorPG = pc.MeasuredPG/pc.PredictedPG - 1
		}
		rep.SaturationCheck = pc
	}
}

// measureCapacity runs the measurements; the report is partial when an
// error stopped them.
func measureCapacity(ctx context.Context, o *capConfig, args []string, stderr io.Writer) (*CapacityReport, error) {
	admin, err := newPool(ctx, o.dsn, 2)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	env, err := collectEnv(ctx, admin)
	if err != nil {
		return nil, err
	}
	mode := "capacity"
	if o.short {
		mode = "sizing"
	}
	c := &capRun{o: o, admin: admin, log: io.Discard, rep: &CapacityReport{Mode: mode, Started: time.Now().UTC().Format(time.RFC3339), Args: args, Env: env}}
	if o.verbose {
		c.log = &lockedWriter{w: stderr}
	}
	defer c.dropLeftovers(context.WithoutCancel(ctx))
	var walLevel string
	var repl bool
	if err := admin.QueryRow(ctx, `SELECT current_setting('wal_level'), (SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user)`).Scan(&walLevel, &repl); err != nil {
		return nil, err
	}
	c.walStream = walLevel == "logical" && repl
	c.rep.Server.WALLevel, c.rep.Server.WALStream = walLevel, c.walStream
	probe, err := newCapPool(ctx, o.dsn, 1, "outboxkit-capacity-probe")
	if err != nil {
		return nil, err
	}
	c.rep.Server.Local = probe.local()
	probe.Close()
	c.wal = newWALProbe(ctx, o.dsn, admin, o.walInspect)
	defer c.wal.close()
	c.wal.logf = c.logf
	c.wal.debug = o.verbose && os.Getenv("OUTBOXKIT_CAPACITY_WALDEBUG") == "1"
	c.rep.Server.WAL = c.wal.note
	for i, w := range o.wakeups {
		if w == "default" {
			o.wakeups[i] = map[bool]string{true: "wal", false: "listen"}[c.walStream]
		}
	}
	err = c.measureAll(ctx)
	if c.oursSum > 0 {
		c.rep.Server.BackgroundShare = float64(c.bgSum) / float64(c.oursSum)
		c.rep.Server.BackgroundAttributable = c.rep.Server.OtherPhases == 0
	}
	c.rep.Env.LoadAfter = loadAvg()
	if !c.rep.Server.Local && err == nil {
		c.rep.Notes = append(c.rep.Notes, "PostgreSQL's backends are not processes of this host (or /proc does not show them): no CPU figure could be measured; run the sizing on the database's host, or on a copy of it")
		if err == nil {
			err = errors.New("PostgreSQL CPU cannot be measured from this host")
		}
	}
	return c.rep, err
}

func (c *capRun) measureAll(ctx context.Context) error {
	o := c.o
	for rep := 0; rep < o.reps; rep++ {
		c.logf("capacity repetition %d of %d (load %s)", rep+1, o.reps, loadSnapshot())
		if o.runs("write") {
			for _, l := range o.layouts {
				if err := c.measureWrites(ctx, rep, l); err != nil {
					return err
				}
			}
		}
		if o.runs("empty") {
			e, err := c.measureEmpty(ctx, rep)
			if err != nil {
				return fmt.Errorf("empty claims: %w", err)
			}
			c.rep.Empty = append(c.rep.Empty, e)
			c.logf("empty claim rep %d: PG %.1f µs, %.2f round trips", rep+1, e.PGPerClaim, e.TurnsPerClaim)
		}
		type drain struct {
			batch     int
			transport string
			layout    postgres.Partitioning
		}
		var drains []drain
		for _, b := range o.batches {
			if !o.runs("drain") {
				break
			}
			drains = append(drains, drain{b, transportNoop, postgres.PartitionNone})
		}
		for _, l := range o.layouts {
			if l != postgres.PartitionNone && o.runs("drain") {
				drains = append(drains, drain{o.tBatch, transportNoop, l})
			}
		}
		for _, t := range o.transports {
			if t != transportNoop && o.runs("drain") {
				drains = append(drains, drain{o.tBatch, t, postgres.PartitionNone})
			}
		}
		if !slices.Contains(o.transports, transportNoop) && len(o.transports) > 0 && o.runs("drain") {
			// The other transports' extra cost is against the no-op
			// publisher at their batch size.
			drains = append(drains, drain{o.tBatch, transportNoop, postgres.PartitionNone})
		}
		if len(drains) > 0 {
			drains = rotate(drains, rep)
		}
		for _, d := range drains {
			res, err := c.measureDrain(ctx, d.batch, d.transport, d.layout, rep)
			if err != nil {
				return fmt.Errorf("drain batch %d %s %s: %w", d.batch, d.transport, layoutName(d.layout), err)
			}
			c.logf("drain %s batch %d %s rep %d: %.0f events/s, PG %.2f µs/event (%.1f µs/claim), relay %.2f µs/event, %.2f round trips/claim, WAL %.0f B/event (load %s)",
				res.Layout, d.batch, d.transport, rep+1, float64(res.Events)/res.Seconds, res.PGPerEv, res.PGPerClaim, res.GoPerEv, res.TurnsPerClaim, res.WALPerEv, res.Load)
			c.rep.Drains = append(c.rep.Drains, res)
		}
		for _, w := range o.wakeups {
			for _, rate := range o.rates {
				if !o.runs("paced") {
					break
				}
				res, err := c.measurePaced(ctx, w, rate, rep)
				if err != nil {
					return fmt.Errorf("paced %s %d/s: %w", w, rate, err)
				}
				c.logf("paced %s %d/s rep %d: relay PG %.1f µs/event (WAL sender %.1f), relay %.1f µs/event, %.2f claims/event (%.2f empty), %.1f events/claim; writers PG %.1f µs/event (load %s)",
					w, rate, rep+1, res.PGPerEv, res.WalsenderPerEv, res.GoPerEv, res.ClaimsPerEv, res.EmptyPerEv, res.EventsPerClaim, res.WriterPGPerEv, res.Load)
				c.rep.Paced = append(c.rep.Paced, res)
			}
		}
		if o.runs("consumer") {
			if err := c.measureConsumers(ctx, rep); err != nil {
				return fmt.Errorf("consumers: %w", err)
			}
		}
		if o.runs("retention") {
			rt, err := c.measureRetention(ctx, rep)
			if err != nil {
				return fmt.Errorf("retention: %w", err)
			}
			c.logf("retention rep %d: %.0f + %.0f B/event kept, vacuum %.1f µs, prune %.1f µs + %.0f B WAL (%.0f FPI) per event", rep+1, rt.HeapBytes, rt.IndexBytes, rt.VacuumPGPerEv, rt.PrunePGPerEv, rt.PruneWALPerEv, rt.PruneFPIPerEv)
			c.rep.Retention = append(c.rep.Retention, rt)
			for _, l := range o.layouts {
				if l == postgres.PartitionNone {
					continue
				}
				pr, err := c.measureRetentionPartitioned(ctx, rep)
				if err != nil {
					return fmt.Errorf("retention on the %s layout: %w", layoutName(l), err)
				}
				c.logf("retention %s rep %d: %.0f + %.0f B/event kept, partition drop %.3f µs + %.1f B WAL (%.1f FPI) per event", pr.Layout, rep+1, pr.HeapBytes, pr.IndexBytes, pr.PrunePGPerEv, pr.PruneWALPerEv, pr.PruneFPIPerEv)
				c.rep.Retention = append(c.rep.Retention, pr)
			}
		}
		if o.saturate > 0 && o.runs("saturate") {
			st, err := c.measureSaturation(ctx, rep)
			if err != nil {
				return fmt.Errorf("saturation: %w", err)
			}
			c.logf("saturation rep %d on CPUs %v: %.0f written/s, %.0f relayed/s, PG %.1f + background %.1f + Go %.1f µs/event, obtained %.2f cores, busy %.2f (load %s)",
				rep+1, st.CPUs, st.Written, st.Relayed, st.PGPerEv, st.BackgroundPerEv, st.GoPerEv, st.Obtained, st.Busy, st.Load)
			c.rep.Saturation = append(c.rep.Saturation, st)
		}
	}
	return nil
}

// dropLeftovers drops the run's schemas that still exist.
func (c *capRun) dropLeftovers(ctx context.Context) {
	rows, err := c.admin.Query(ctx, `SELECT nspname FROM pg_namespace WHERE nspname = ANY($1)`, c.schemas)
	if err != nil {
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, n := range names {
		_ = (&schema{name: n, pool: c.admin}).drop()
	}
}

// --- the text report ---

func (r *CapacityReport) writeText(w io.Writer, o *capConfig) {
	e := r.Env
	fmt.Fprintf(w, "## Capacity (%s, %s)\n\n", r.Mode, r.Started)
	fmt.Fprintf(w, "- machine: %d CPUs (%s), GOMAXPROCS %d, %s; load average %s before, %s after\n", e.NumCPU, e.CPUModel, e.GOMAXPROCS, e.GoVersion, e.LoadBefore, e.LoadAfter)
	fmt.Fprintf(w, "- %s; wal_level %s; %s\n", e.PGVersion, r.Server.WALLevel, r.Server.WAL)
	fmt.Fprintf(w, "- server background processes: %s\n\n", r.backgroundLine())
	if len(r.Write) > 0 {
		fmt.Fprintf(w, "### Writers (business transaction: UPDATE of one account row; closed loop)\n\n| case | writers | tx/s | PG µs/tx | client µs/tx | round trips/tx | WAL outbox B/tx | WAL business B/tx | commit B/tx | FPI B/tx | load |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, x := range r.Write {
			fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %.2f | %s | %s | %s | %s | %s |\n", withLayout(x.Case, x.Layout), x.Writers, fmtNum(float64(x.Tx)/x.Seconds), fmtNum(x.PGPerTx), fmtNum(x.GoPerTx), x.TurnsPerTx,
				fmtNum(x.WALOutboxPerTx), fmtNum(x.WALOtherPerTx), fmtNum(x.WALCommitPerTx), fmtNum(x.WALFPIPerTx), x.Load)
		}
		fmt.Fprintln(w)
	}
	if len(r.Drains) > 0 {
		fmt.Fprintf(w, "### Relay drains (a backlog, full batches; the relay in a process of its own)\n\n| batch | transport (layout) | events/s | PG µs/event | PG µs/claim | relay µs/event | round trips/claim | WAL B/event | commit B/event | FPI B/event | round ms | publish ms | transport's side µs/event | load |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, x := range r.Drains {
			fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s | %.2f | %s | %s | %s | %.3f | %.3f | %s | %s |\n", x.Batch, withLayout(x.Transport, x.Layout), fmtNum(float64(x.Events)/x.Seconds), fmtNum(x.PGPerEv), fmtNum(x.PGPerClaim),
				fmtNum(x.GoPerEv), x.TurnsPerClaim, fmtNum(x.WALPerEv), fmtNum(x.WALCommitPerEv), fmtNum(x.WALFPIPerEv), x.RoundMs, x.PublishMs, fmtNum(x.OtherPerEv), x.Load)
		}
		fmt.Fprintln(w)
	}
	if len(r.Empty) > 0 {
		fmt.Fprintf(w, "### Empty claims\n\n| claims | PG µs/claim | round trips/claim | load |\n|---|---|---|---|\n")
		for _, x := range r.Empty {
			fmt.Fprintf(w, "| %d | %s | %.2f | %s |\n", x.Claims, fmtNum(x.PGPerClaim), x.TurnsPerClaim, x.Load)
		}
		fmt.Fprintln(w)
	}
	if len(r.Paced) > 0 {
		fmt.Fprintf(w, "### Wake-ups (relay defaults but for the wake-up; writers paced, one event per transaction)\n\n| wake-up | rate | committed/s | relay PG µs/event | of which WAL sender | relay µs/event | claims/event | empty/event | events/claim | round trips/event | writers' notify | writer PG µs/event | load |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, x := range r.Paced {
			fmt.Fprintf(w, "| %s (%s) | %d/s | %s | %s | %s | %s | %.2f | %.2f | %.2f | %.2f | %s | %s | %s |\n", x.Wakeup, x.WakeupSeen, x.Rate, fmtNum(x.Reached), fmtNum(x.PGPerEv), fmtNum(x.WalsenderPerEv),
				fmtNum(x.GoPerEv), x.ClaimsPerEv, x.EmptyPerEv, x.EventsPerClaim, x.TurnsPerEv, x.WriterNotify, fmtNum(x.WriterPGPerEv), x.Load)
		}
		fmt.Fprintln(w)
	}
	if len(r.Consumer) > 0 {
		fmt.Fprintf(w, "### Consumers (one effect row per delivery; the operation's own WAL and commit records)\n\n| case | deliveries | callers | deliveries/s | PG µs/delivery | client µs/delivery | round trips | WAL B | FPI B | load |\n|---|---|---|---|---|---|---|---|---|---|\n")
		for _, x := range r.Consumer {
			fmt.Fprintf(w, "| %s | %d | %d | %s | %s | %s | %.2f | %s | %s | %s |\n", x.Case, x.Deliveries, x.Callers, fmtNum(float64(x.Deliveries)/x.Seconds), fmtNum(x.PGPerEv), fmtNum(x.GoPerEv), x.TurnsPerEv, fmtNum(x.WALPerEv), fmtNum(x.WALFPIPerEv), x.Load)
		}
		fmt.Fprintln(w)
	}
	if len(r.Retention) > 0 {
		fmt.Fprintf(w, "### Retention (per published event; on a partitioned layout the prune is the partition's drop)\n\n| events | heap B (before VACUUM) | indexes B (before) | VACUUM PG µs | VACUUM WAL B | prune PG µs | prune WAL B | prune FPI B | prune round trips | VACUUM after prune PG µs / WAL B | processed record B | load |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, x := range r.Retention {
			fmt.Fprintf(w, "| %s | %s (%s) | %s (%s) | %s | %s | %s | %s | %s | %.4f | %s / %s | %s | %s |\n", withLayout(strconv.Itoa(x.Events), x.Layout), fmtNum(x.HeapBytes), fmtNum(x.HeapBytesBefore), fmtNum(x.IndexBytes), fmtNum(x.IndexBytesBefore),
				fmtNum(x.VacuumPGPerEv), fmtNum(x.VacuumWALPerEv), fmtNum(x.PrunePGPerEv), fmtNum(x.PruneWALPerEv), fmtNum(x.PruneFPIPerEv), x.PruneTurnsPerEv, fmtNum(x.PruneVacuumPGPerEv), fmtNum(x.PruneVacuumWALPerEv), fmtNum(x.ProcessedBytes), x.Load)
		}
		fmt.Fprintln(w)
	}
	if len(r.Saturation) > 0 {
		fmt.Fprintf(w, "### Saturation (writers flat out, one relay with its defaults, everything on CPUs %v)\n\n| written/s | relayed/s | PG µs/event | background µs/event | Go µs/event | events/claim | obtained cores | busy cores | load |\n|---|---|---|---|---|---|---|---|---|\n", r.Saturation[0].CPUs)
		for _, x := range r.Saturation {
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %.1f | %.2f | %.2f | %s |\n", fmtNum(x.Written), fmtNum(x.Relayed), fmtNum(x.PGPerEv), fmtNum(x.BackgroundPerEv), fmtNum(x.GoPerEv), x.EventsPerClaim, x.Obtained, x.Busy, x.Load)
		}
		fmt.Fprintln(w)
	}
	if !r.Modelled {
		for _, n := range r.Notes {
			fmt.Fprintf(w, "- %s\n", n)
		}
		return
	}
	in := r.Inputs
	fmt.Fprintf(w, "### Model inputs (wake-up %s, %s layout; docs/SCALING.md)\n\n", r.Wakeup, in.Layout)
	ten := "10 per Add not measured"
	if in.WritePG10 > 0 {
		ten = fmt.Sprintf("%s µs and %s B each with 10 per Add", fmtNum(in.WritePG10), fmtNum(in.WriteWAL10))
	}
	fmt.Fprintf(w, "- write: %s µs PostgreSQL CPU and %s B WAL per event (Add in the business transaction; %s), %.2f round trips per Add\n",
		fmtNum(in.WritePG), fmtNum(in.WriteWAL), ten, in.AddRoundTrips)
	fmt.Fprintf(w, "- relay: PostgreSQL %s µs per event + %s µs per claim round (fit over the drains, worst point %.0f %% off); relay process %s + %s/b µs; WAL %s + %s/b B; %.2f round trips per full batch; empty claim %s µs\n",
		fmtNum(in.RelayEventPG), fmtNum(in.RelayRoundPG), 100*in.RelayFitError, fmtNum(in.RelayEventGo), fmtNum(in.RelayRoundGo), fmtNum(in.RelayEventWAL), fmtNum(in.RelayRoundWAL), in.RoundTripsFull, fmtNum(in.EmptyClaimPG))
	for _, m := range []string{"wal", "listen", "poll"} {
		if wc, ok := in.Wakeups[m]; ok {
			fmt.Fprintf(w, "- wake-up %s (%d paced runs): below %.0f events/s events gather %.2f ms per claim, a round not full costs %s µs and %.2f empty looks; from there %.2f ms, %s µs, %.2f looks; %s claims/s polling; writers' notification %s µs per event\n",
				m, wc.Runs, modelPaceFrom, wc.TauMsLow, fmtNum(wc.RoundPGLow), wc.LooksLow, wc.TauMs, fmtNum(wc.RoundPG), wc.Looks, fmtNum(wc.PollRate), fmtNum(wc.NotifyPG))
		}
	}
	fmt.Fprintf(w, "- WAL sender (one per relay, while its stream runs): %s µs per event it streams, %s µs a second whatever the rate, and %s µs per KiB of the database's other WAL (assumed: postgres/wal.go's figure)\n", fmtNum(in.WalsenderPerEvent), fmtNum(in.WalsenderFixed), fmtNum(in.WalsenderPerKiB))
	for _, t := range capTransports[1:] {
		if tc, ok := in.Transports[t]; ok {
			fmt.Fprintf(w, "- transport %s at batch %d: +%s µs relay CPU per event, publish %.2f ms per batch\n", t, in.TransportBatch, fmtNum(tc.ExtraCPU), tc.PublishMs)
		}
	}
	fmt.Fprintf(w, "- retention: VACUUM %s µs + %s B, prune %s µs + %s B, VACUUM after it %s µs + %s B per event; %s B heap + %s B indexes per event kept (%s before VACUUM)\n",
		fmtNum(in.VacuumPG), fmtNum(in.VacuumWAL), fmtNum(in.PrunePG), fmtNum(in.PruneWAL), fmtNum(in.PruneVacuumPG), fmtNum(in.PruneVacuumWAL), fmtNum(in.HeapBytes), fmtNum(in.IndexBytes), fmtNum(in.BloatedBytes))
	fmt.Fprintf(w, "- consumers, PostgreSQL µs per delivery: Deduper.Once %s, Sequencer.OnceInOrder %s, Inbox.Accept %s, inbox worker %s; processed record %s B\n",
		fmtNum(in.DedupePG), fmtNum(in.SequencerPG), fmtNum(in.AcceptPG), fmtNum(in.InboxWorkerPG), fmtNum(in.ProcessedBytes))
	fmt.Fprintf(w, "- background share %.3f (%s)\n\n", in.background(), map[bool]string{true: "measured", false: "assumed"}[in.BackgroundMeasured])
	if len(r.PacedCheck) > 0 {
		fmt.Fprintf(w, "### The model against the paced runs (relay PostgreSQL CPU per event)\n\n| wake-up | rate | measured µs | model µs | measured events/claim | model events/claim |\n|---|---|---|---|---|---|\n")
		for _, p := range r.PacedCheck {
			fmt.Fprintf(w, "| %s | %d/s | %s | %s | %.2f | %.2f |\n", p.Wakeup, p.Rate, fmtNum(p.Measured), fmtNum(p.Predicted), p.Batch, p.ModelB)
		}
		fmt.Fprintln(w)
	}
	if sc := r.SaturationCheck; sc != nil {
		fmt.Fprintf(w, "### The model against the saturation run\n\n- %.0f cores: measured %s events/s, predicted %s (error %+.1f %%); at the CPU obtained, predicted %s (error %+.1f %%)\n",
			sc.Cores, fmtNum(sc.Measured), fmtNum(sc.Predicted), 100*sc.Error, fmtNum(sc.PredictedObtained), 100*sc.ErrorObtained)
		fmt.Fprintf(w, "- PostgreSQL CPU per event at the rate sustained: measured %s µs, predicted %s µs (error %+.1f %%); the writers' and the relay's own: measured %s µs, predicted %s µs\n\n",
			fmtNum(sc.MeasuredPG), fmtNum(sc.PredictedPG), 100*sc.ErrorPG, fmtNum(sc.MeasuredGo), fmtNum(sc.PredictedGo))
	}
	fmt.Fprintf(w, "### Prediction\n\n")
	writePrediction(w, r.Prediction)
	fmt.Fprintf(w, "\nWorked examples (half the cores for the outbox, the same rate and retention):\n\n| cores | max events/s | relays at max |\n|---|---|---|\n")
	for _, ex := range r.Examples {
		fmt.Fprintf(w, "| %.0f | %s | %d |\n", ex.Scenario.Cores, fmtNum(ex.MaxRate), ex.MaxRelays)
	}
	fmt.Fprintln(w)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "- %s\n", n)
	}
}

// withLayout names a row's outbox layout when it is not the plain one.
func withLayout(name, layout string) string {
	if plainLayout(layout) {
		return name
	}
	return name + " (" + layout + " partitions)"
}

func (r *CapacityReport) backgroundLine() string {
	s := r.Server
	switch {
	case s.QuietPhases == 0 && s.OtherPhases == 0:
		return "not measured"
	case s.BackgroundAttributable:
		return fmt.Sprintf("%.3f of the measured backends' CPU (nobody else used the server in %d measurements)", s.BackgroundShare, s.QuietPhases)
	}
	return fmt.Sprintf("not attributable (others used the server during %d of %d measurements); the model assumes %.2f", s.OtherPhases, s.OtherPhases+s.QuietPhases, DefaultBackground)
}

func writePrediction(w io.Writer, p Prediction) {
	s := p.Scenario
	where := "the database's"
	if s.Colocated {
		where = "shared with the writers and the relay"
	}
	fmt.Fprintf(w, "For %s cores (%s), %.0f %% of them for the outbox, wake-up %s, transport %s, batch %d:\n\n", fmtNum(s.Cores), where, 100*s.CPUShare, s.Wakeup, s.Transport, s.Batch)
	fmt.Fprintf(w, "- max events/s: %s (written and relayed, with %d relays)\n", fmtNum(p.MaxRate), p.MaxRelays)
	if a := p.At; a != nil {
		verdict := "fits"
		if !a.Fits {
			verdict = "does NOT fit"
		}
		stream := ""
		if s.Wakeup == "wal" {
			stream = fmt.Sprintf(", the streams running %.0f %% of the time", 100*a.StreamDuty)
		}
		fmt.Fprintf(w, "- at %s events/s (%s): %.2f cores, %.0f %% of the share; %s µs per event (write %s, relay %s at %.1f events per claim, WAL senders %s%s, retention %s, background %s)\n",
			fmtNum(a.Rate), verdict, a.Cores, 100*a.ShareUsed, fmtNum(a.PerEventUs), fmtNum(a.WritePG), fmtNum(a.RelayPG), a.Batch, fmtNum(a.WalsenderPG), stream, fmtNum(a.RetentionPG), fmtNum(a.BackgroundPG))
		fmt.Fprintf(w, "- relays: %d (%d needed, one more for availability), %s µs relay CPU per event, at most %s events/s each; connections: %d (%d WAL senders and replication slots)\n",
			a.Relays, a.RelaysNeeded, fmtNum(a.RelayCPU), fmtNum(a.RelayCap), a.Connections, a.WalSenders)
		fmt.Fprintf(w, "- WAL: %s B per event, %s GiB per day at %s events/s on average\n", fmtNum(a.WALPerEvent), fmtNum(a.WALGiBPerDay), fmtNum(s.AvgRate))
		fmt.Fprintf(w, "- table under %.0f h retention: %s rows, %s GiB after VACUUM (%s GiB with the dead versions VACUUM has not reclaimed)\n",
			s.RetentionHours, fmtNum(a.RowsKept), fmtNum(a.TableGiB), fmtNum(a.TableGiBBloat))
	}
	if math.IsInf(p.MaxRate, 0) || p.MaxRate == 0 {
		fmt.Fprintf(w, "- (the measured costs gave no usable maximum)\n")
	}
}
