package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/outboxkit/postgres"
)

// defaultDSN is the local server CI starts (trust authentication).
const defaultDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// allWorkloads in the order a full run executes them.
var allWorkloads = []string{"drain", "latency", "write", "consumer", "idle", "growth", "qstash", "brokers", "scaleout"}

// optInWorkloads run only when -workloads names them, after the others:
// the partitioned layout's (partitions.go), whose preloads take minutes.
var optInWorkloads = []string{"partitions", "partition-soak"}

// options are the harness's flags.
type options struct {
	dsn        string
	workloads  []string
	events     int
	reps       int
	batches    []int
	rates      []int
	latencyFor time.Duration
	writeFor   time.Duration
	writers    int
	procs      []int
	procBatch  int
	procConc   int
	qsBatch    int
	qsConc     int
	wmRates    []int
	// The idle workload's measurement window (idle.go).
	idleFor time.Duration
	// The growth workload's large backlog and published rows kept beside
	// the small one (-events) (growth.go).
	growthEvents   int
	growthRetained int
	// The partitions workload's published rows kept, over how many days,
	// its latency rate and the rows of the day it retires; the soak's
	// length, rate, retention and partitioned layout (partitions.go,
	// partition_soak.go).
	partRetained, partDays, partRate, partRetire int
	partSkip                                     []string // phases to leave out: drain, latency, retire
	soakFor, soakRetain                          time.Duration
	soakRate                                     int
	soakParts                                    postgres.Partitioning
	soakTogether                                 bool // both layouts at once, not one after the other
	// The consumer workload (consumer.go): paced rates, each run's
	// length, the paced runs' senders and the closed loop's.
	consumerRates   []int
	consumerFor     time.Duration
	consumerSenders int
	consumerClosed  int
	river           bool
	// River tuned for throughput (river.go).
	riverWorkers  int
	riverCooldown time.Duration
	riverPoll     time.Duration
	extras        bool
	// databaseSQL adds the database/sql variants (databasesql.go).
	databaseSQL bool
	proposals   bool
	jsonOut     bool
	profileDir  string
	verbose     bool

	// Child-process role (hidden).
	role      string
	schema    string
	record    string
	cpuprof   string
	childConc int

	// capacity is the capacity and sizing modes' configuration
	// (capacity.go), nil when neither was asked for.
	capacity *capConfig
}

func (o *options) has(w string) bool { return slices.Contains(o.workloads, w) }

func parseOptions(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dsn := os.Getenv("DATABASE_URL")
	if dsn == "" {
		dsn = defaultDSN
	}
	var workloads, batches, rates, procs, consumerRates string
	fs.StringVar(&o.dsn, "dsn", dsn, "PostgreSQL connection URL (default $DATABASE_URL, else the local test server)")
	fs.StringVar(&workloads, "workloads", strings.Join(allWorkloads, ","), "comma-separated subset of "+strings.Join(allWorkloads, ","))
	fs.IntVar(&o.events, "events", 100_000, "events preloaded for the drain, qstash and scaleout workloads")
	fs.IntVar(&o.reps, "reps", 3, "repetitions; tables show medians")
	fs.StringVar(&batches, "batches", "100,500", "batch sizes for the drain workload")
	fs.StringVar(&rates, "rates", "500,1000,2000,5000", "events/s for the latency workload")
	fs.DurationVar(&o.latencyFor, "latency-duration", 10*time.Second, "length of each paced latency run")
	fs.DurationVar(&o.writeFor, "write-duration", 10*time.Second, "length of each write-overhead run (pgbench -T)")
	fs.IntVar(&o.writers, "writers", 8, "concurrent writers (write workload) and producers (latency workload)")
	fs.DurationVar(&o.idleFor, "idle-duration", 60*time.Second, "how long the idle workload measures each idle relay's CPU")
	fs.IntVar(&o.growthEvents, "growth-events", 1_000_000, "the growth workload's large backlog, drained beside one of -events")
	fs.IntVar(&o.growthRetained, "growth-retained", 2_000_000, "published rows the growth workload keeps beside a backlog of -events")
	fs.IntVar(&o.partRetained, "partition-retained", 10_000_000, "published rows the partitions workload keeps beside its backlog, on each layout")
	fs.IntVar(&o.partDays, "partition-days", 10, "days over which the partitions workload's kept rows were created")
	fs.IntVar(&o.partRate, "partition-rate", 1000, "events/s of the partitions workload's latency runs")
	fs.IntVar(&o.partRetire, "partition-retire", 1_000_000, "published rows of the day the partitions workload retires")
	partSkip := fs.String("partition-skip", "", "phases of the partitions workload to leave out (comma-separated: drain, latency, retire)")
	fs.DurationVar(&o.soakFor, "soak-duration", 30*time.Minute, "length of each layout's run in the partition-soak workload")
	fs.IntVar(&o.soakRate, "soak-rate", 2000, "events/s written and relayed in the partition-soak workload")
	fs.DurationVar(&o.soakRetain, "soak-retention", 10*time.Minute, "RetainPublished of the partition-soak workload's Retention")
	fs.BoolVar(&o.soakTogether, "soak-together", false, "run the partition-soak workload's two layouts at the same time (each at -soak-rate) rather than one after the other: half the time, on a machine with the cores for both (2 cores sustain about 1,500 events/s each)")
	soakParts := fs.String("soak-partitions", "5m", "the partitioned layout the partition-soak workload runs beside the plain one: daily, hourly or minutes that divide an hour (5m)")
	fs.StringVar(&consumerRates, "consumer-rates", "1000", "deliveries/s of the consumer workload's paced runs")
	fs.DurationVar(&o.consumerFor, "consumer-duration", 10*time.Second, "length of each paced consumer run; the closed-loop run sends as many deliveries as the fastest")
	fs.IntVar(&o.consumerSenders, "consumer-senders", 16, "concurrent senders (keep-alive connections) of the consumer workload's paced runs")
	fs.IntVar(&o.consumerClosed, "consumer-closed", 8, "concurrent senders of the consumer workload's closed-loop run (throughput at saturation)")
	fs.StringVar(&procs, "procs", "1,2,4", "relay process counts for the scaleout workload")
	fs.IntVar(&o.procBatch, "procs-batch", 100, "relay batch size in the scaleout workload")
	fs.IntVar(&o.procConc, "procs-concurrency", 0, "relay Concurrency of each scaleout process (0: core's default, 2)")
	fs.IntVar(&o.qsBatch, "qstash-batch", 100, "relay batch size in the qstash workload")
	fs.IntVar(&o.qsConc, "qstash-concurrency", 2, "relay Concurrency in the qstash workload")
	wmRates := fs.String("watermill-rates", "500,1000", "rates at which the latency workload also measures Watermill's forwarder (10 ms poll); \"none\" for none")
	fs.BoolVar(&o.river, "river", true, "also run River (riverqueue/river), with its defaults and tuned, in the drain, latency and write workloads")
	fs.IntVar(&o.riverWorkers, "river-workers", 1000, "MaxWorkers of River tuned for throughput")
	fs.DurationVar(&o.riverCooldown, "river-cooldown", 5*time.Millisecond, "FetchCooldown of River tuned for throughput")
	fs.DurationVar(&o.riverPoll, "river-poll", 10*time.Millisecond, "FetchPollInterval of River tuned for throughput (at least -river-cooldown)")
	fs.BoolVar(&o.extras, "extras", true, "also run the diagnostic variants (DeletePublished drain, NOTIFY costs in the write workload)")
	fs.BoolVar(&o.databaseSQL, "databasesql", false, "also run the write and drain workloads through database/sql (lib/pq and pgx's stdlib driver) beside pgx (databasesql.go); off by default to keep the full run's length")
	fs.BoolVar(&o.proposals, "proposals", false, "also measure the prototypes of proposed store and relay changes (proposal.go)")
	fs.BoolVar(&o.jsonOut, "json", false, "print JSON results on stdout (the table goes to stderr)")
	fs.StringVar(&o.profileDir, "cpuprofile", "", "directory for CPU profiles of the first repetition of each run")
	fs.BoolVar(&o.verbose, "v", false, "log progress to stderr")
	// Used when the harness re-executes itself as a relay process.
	fs.StringVar(&o.role, "role", "", "internal: \"relay\" runs one relay process of the scaleout workload")
	fs.StringVar(&o.schema, "schema", "", "internal: schema of the relay process")
	fs.StringVar(&o.record, "record", "", "internal: file the relay process records (event ID, lease token) in")
	fs.StringVar(&o.cpuprof, "relay-cpuprofile", "", "internal: CPU profile file of the relay process")
	fs.IntVar(&o.childConc, "relay-concurrency", 0, "internal: relay Concurrency of the relay process (0: default)")
	capFlags := registerCapacityFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	for _, w := range splitList(workloads) {
		if !slices.Contains(allWorkloads, w) && !slices.Contains(optInWorkloads, w) {
			return nil, fmt.Errorf("-workloads: unknown workload %q (known: %s; and, when named, %s)", w, strings.Join(allWorkloads, ","), strings.Join(optInWorkloads, ","))
		}
		o.workloads = append(o.workloads, w)
	}
	o.partSkip = splitList(*partSkip)
	if o.soakParts, err = postgres.ParsePartitioning(*soakParts); err != nil {
		return nil, fmt.Errorf("-soak-partitions: %w", err)
	}
	if o.soakParts == postgres.PartitionNone {
		return nil, fmt.Errorf("-soak-partitions %q: name a partitioned layout (daily, hourly, 5m); the soak runs the plain table beside it", *soakParts)
	}
	if o.batches, err = intList("batches", batches); err != nil {
		return nil, err
	}
	if o.rates, err = intList("rates", rates); err != nil {
		return nil, err
	}
	if o.procs, err = intList("procs", procs); err != nil {
		return nil, err
	}
	if o.consumerRates, err = intList("consumer-rates", consumerRates); err != nil {
		return nil, err
	}
	if *wmRates != "none" && *wmRates != "" {
		if o.wmRates, err = intList("watermill-rates", *wmRates); err != nil {
			return nil, err
		}
	}
	switch {
	case o.events < 1:
		return nil, errors.New("-events must be at least 1")
	case o.reps < 1:
		return nil, errors.New("-reps must be at least 1")
	case o.writers < 1:
		return nil, errors.New("-writers must be at least 1")
	case o.latencyFor <= 0 || o.writeFor <= 0:
		return nil, errors.New("-latency-duration and -write-duration must be positive")
	case o.procBatch < 1 || o.qsBatch < 1 || o.qsConc < 1:
		return nil, errors.New("-procs-batch, -qstash-batch and -qstash-concurrency must be at least 1")
	case o.riverWorkers < 1 || o.riverWorkers > 10_000:
		return nil, errors.New("-river-workers must be between 1 and 10000 (River's QueueNumWorkersMax)")
	case o.riverCooldown < time.Millisecond || o.riverPoll < o.riverCooldown:
		return nil, errors.New("-river-cooldown must be at least 1ms (River's FetchCooldownMin) and -river-poll at least -river-cooldown")
	case o.idleFor < time.Second:
		return nil, fmt.Errorf("-idle-duration %v is too short: give at least 1s (backend CPU time is counted in 10 ms ticks)", o.idleFor)
	case o.growthEvents < 1 || o.growthRetained < 1:
		return nil, errors.New("-growth-events and -growth-retained must be at least 1")
	case o.consumerSenders < 1 || o.consumerClosed < 1:
		return nil, errors.New("-consumer-senders and -consumer-closed must be at least 1")
	case o.consumerFor <= 0:
		return nil, errors.New("-consumer-duration must be positive")
	case o.consumerDeliveries(slices.Min(o.consumerRates)) < 1:
		return nil, fmt.Errorf("-consumer-duration %v sends no delivery at %d/s: make it longer", o.consumerFor, slices.Min(o.consumerRates))
	case o.has("growth") && o.growthEvents <= o.events:
		return nil, fmt.Errorf("-growth-events (%d) must be larger than -events (%d): the growth workload compares the two backlogs", o.growthEvents, o.events)
	}
	if o.capacity, err = capFlags.config(o); err != nil {
		return nil, err
	}
	return o, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func intList(name, s string) ([]int, error) {
	var out []int
	for _, p := range splitList(s) {
		v, err := strconv.Atoi(p)
		if err != nil || v < 1 {
			return nil, fmt.Errorf("-%s: %q is not a positive integer", name, p)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-%s is empty", name)
	}
	return out, nil
}

// run is main without the process: it returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	o, err := parseOptions(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "bench:", err)
		return 2
	}
	if o.role == "relay" {
		if err := runRelayProcess(ctx, o, stdin, stdout); err != nil {
			fmt.Fprintln(stderr, "bench relay:", err)
			return 1
		}
		return 0
	}
	if o.role == capacityRelayRole {
		if err := runCapacityRelay(ctx, stdin, stdout); err != nil {
			fmt.Fprintln(stderr, "bench capacity relay:", err)
			return 1
		}
		return 0
	}
	if o.role != "" {
		fmt.Fprintf(stderr, "bench: unknown -role %q\n", o.role)
		return 2
	}
	if o.capacity != nil {
		return runCapacity(ctx, o.capacity, args, stdout, stderr)
	}
	rep, err := runAll(ctx, o, stderr)
	if rep != nil {
		if o.jsonOut {
			rep.writeTables(stderr)
			if jerr := rep.writeJSON(stdout); jerr != nil && err == nil {
				err = jerr
			}
		} else {
			rep.writeTables(stdout)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	return 0
}
