package main

import (
	"fmt"
	"math"
	"slices"
	"sort"
)

// The capacity model (docs/SCALING.md): what one PostgreSQL primary
// sustains, from the per-event costs the capacity mode measures. Every
// input is CPU time, bytes or a count per event (or per claim), so it
// carries from a 2-core test machine to a 64-core primary as long as the
// work per event does not change with the number of cores; the validation
// in SCALING.md is how far that held between one core and two.
//
// The relay's cost per event depends on how many events each claim finds
// (b): a claim round (claim and settlement) costs F whatever it holds, and
// each event V more. b follows the rate each relay sees, as core.Relay
// paces its claims (core/relay.go, flowPacer): below paceFrom events/s each
// wake-up is claimed at once (b near 1, measured); from paceFrom the claims
// are spaced by a microsecond per event per second, at most maxPace, so
// b = r·min(maxPace, r·1 µs) until it reaches the batch size, from which the
// relay claims full batches back to back.

// Inputs are the model's inputs: medians of the capacity measurements.
type Inputs struct {
	// Writers. WritePG is the PostgreSQL CPU an event adds to the
	// business transaction that writes it (Add with one event), WritePG10
	// per event with ten in one Add; WriteNotifyPG what a writer's
	// after-commit notification adds per event (the LISTEN mode's writers);
	// WriteWAL and WriteWAL10 the WAL bytes per event of the outbox table
	// and its indexes; AddRoundTrips Add's round trips.
	WritePG       float64 `json:"write_pg_us_per_event"`
	WritePG10     float64 `json:"write_pg_us_per_event_10_per_add"`
	WriteNotifyPG float64 `json:"write_notify_pg_us_per_event"`
	WriteWAL      float64 `json:"write_wal_bytes_per_event"`
	WriteWAL10    float64 `json:"write_wal_bytes_per_event_10_per_add"`
	AddRoundTrips float64 `json:"add_round_trips"`
	// The business transaction with its event, whole (for predictions of
	// a machine that also runs the writers): PostgreSQL CPU, the writers'
	// client CPU, and the commit record.
	TxWithEventPG float64 `json:"tx_with_event_pg_us"`
	TxWithEventGo float64 `json:"tx_with_event_go_us"`
	TxCommitWAL   float64 `json:"tx_commit_wal_bytes"`

	// Relay, fitted over the drains' batch sizes: PostgreSQL CPU per
	// claim round (F) and per event (V), the same for the relay process's
	// CPU and for WAL (commit records included), and the wall time of a
	// round's database calls (per round and per event).
	RelayRoundPG   float64 `json:"relay_round_pg_us"`
	RelayEventPG   float64 `json:"relay_event_pg_us"`
	RelayRoundGo   float64 `json:"relay_round_cpu_us"`
	RelayEventGo   float64 `json:"relay_event_cpu_us"`
	RelayRoundWAL  float64 `json:"relay_round_wal_bytes"`
	RelayEventWAL  float64 `json:"relay_event_wal_bytes"`
	RelayRoundMs   float64 `json:"relay_round_db_ms"`
	RelayEventMs   float64 `json:"relay_event_db_ms"`
	RelayFitError  float64 `json:"relay_fit_max_error"`
	RoundTripsFull float64 `json:"round_trips_per_full_batch"`
	// EmptyClaimPG is a claim that finds nothing.
	EmptyClaimPG float64 `json:"empty_claim_pg_us"`
	// Wakeups are each wake-up mode's behaviour below full batches, from
	// the paced runs ("wal", "listen", "poll").
	Wakeups map[string]WakeupCost `json:"wakeups,omitempty"`
	// WalsenderPerEvent is a WAL sender's CPU per outbox event it streams
	// (the WAL wake-up: each relay process has one, and each sees every
	// event), and WalsenderPerKiB its CPU per KiB of the database's other
	// WAL, which it decodes too.
	WalsenderPerEvent float64 `json:"walsender_pg_us_per_event"`
	WalsenderPerKiB   float64 `json:"walsender_pg_us_per_kib"`
	// WalsenderFixed is what a streaming WAL sender spends a second
	// whatever the rate (keep-alives, the relay's status replies every
	// tenth of a second), µs: with WalsenderPerEvent, a line fitted over
	// the paced runs' rates when there are two or more.
	WalsenderFixed float64 `json:"walsender_pg_us_per_second"`
	// Transports: the relay process's CPU per event beyond the no-op
	// publisher's, and a publish's wall time, at TransportBatch.
	Transports     map[string]TransportCost `json:"transports,omitempty"`
	TransportBatch int                      `json:"transport_batch"`

	// Retention, per event: VACUUM of the claim's and the settlement's dead
	// row versions, the prune at the end of the retention (with full-page
	// images: the rows were last written before the last checkpoint) and
	// the VACUUM after it; sizes of a kept published event.
	VacuumPG       float64 `json:"vacuum_pg_us_per_event"`
	VacuumWAL      float64 `json:"vacuum_wal_bytes_per_event"`
	PrunePG        float64 `json:"prune_pg_us_per_event"`
	PruneWAL       float64 `json:"prune_wal_bytes_per_event"`
	PruneVacuumPG  float64 `json:"prune_vacuum_pg_us_per_event"`
	PruneVacuumWAL float64 `json:"prune_vacuum_wal_bytes_per_event"`
	HeapBytes      float64 `json:"heap_bytes_per_event"`
	IndexBytes     float64 `json:"index_bytes_per_event"`
	BloatedBytes   float64 `json:"bytes_per_event_before_vacuum"`
	ProcessedBytes float64 `json:"processed_bytes_per_delivery"`

	// Consumers: PostgreSQL CPU and WAL per delivery.
	DedupePG      float64 `json:"dedupe_pg_us"`
	SequencerPG   float64 `json:"sequencer_pg_us"`
	AcceptPG      float64 `json:"inbox_accept_pg_us"`
	InboxWorkerPG float64 `json:"inbox_worker_pg_us"`
	DedupeWAL     float64 `json:"dedupe_wal_bytes"`

	// Layout is the outbox table's layout these inputs are for: "plain",
	// "hourly" or "daily" (partitions retired whole: the table keeps up to
	// the retention plus one period).
	Layout string `json:"layout"`

	// Background is the server's background processes' CPU (WAL writer,
	// checkpointer, background writer) as a share of the backends' CPU;
	// BackgroundMeasured says it was measured on a server nobody else
	// used, not assumed.
	Background         float64 `json:"background_share"`
	BackgroundMeasured bool    `json:"background_measured"`
}

// TransportCost is one transport's cost in the relay process.
type TransportCost struct {
	ExtraCPU  float64 `json:"extra_relay_cpu_us_per_event"`
	PublishMs float64 `json:"publish_ms_per_batch"`
}

// WakeupCost is how a wake-up mode's relay claims while events trickle
// (batches not full), from the paced runs.
type WakeupCost struct {
	// TauMs is how long events gather before the claim that takes them,
	// in ms (events per claim = rate × TauMs), from the wake-up's delay
	// and the claim's own round trip.
	TauMs    float64 `json:"tau_ms"`
	TauMsLow float64 `json:"tau_ms_below_pacing"`
	// Looks are the empty claims per claim that found events (WAL,
	// LISTEN: the relay looks once more after a round); PollRate the
	// claims a second a polling relay makes while events flow, found or
	// not (poll).
	Looks    float64 `json:"empty_claims_per_claim"`
	PollRate float64 `json:"claims_per_second"`
	// RoundPG is the PostgreSQL CPU of a claim round that is not full:
	// its claim and its settlement in two round trips, not pipelined;
	// while the relay paces its claims (from paceFrom events/s), and
	// below (RoundPGLow, LooksLow), where each round starts from an idle
	// wait and costs more. When only one regime was measured, both hold
	// its figures.
	RoundPG    float64 `json:"round_pg_us"`
	RoundPGLow float64 `json:"round_pg_us_below_pacing"`
	LooksLow   float64 `json:"empty_claims_per_claim_below_pacing"`
	// NotifyPG is what the writers' notifications add per event (LISTEN
	// only: NotifyAfterCommit).
	NotifyPG float64 `json:"writer_notify_pg_us"`
	// Runs is the paced runs it comes from.
	Runs int `json:"runs"`
}

// DefaultWalsenderPerKiB is what a WAL sender spends decoding a KiB of WAL
// that is not the outbox's: ~3 µs, measured by postgres/wal.go's authors
// while another job wrote 79 MiB/s (a quarter of a core per relay). The
// capacity mode cannot measure it apart from the per-event cost on a
// server whose other WAL it does not control.
const DefaultWalsenderPerKiB = 3.0

// walsenderAt is one streaming WAL sender's CPU per event at rate events/s
// with otherKiB KiB/s of the database's other WAL.
func (in *Inputs) walsenderAt(rate, otherKiB float64) float64 {
	if rate <= 0 {
		return 0
	}
	return in.WalsenderPerEvent + (in.WalsenderFixed+in.WalsenderPerKiB*otherKiB)/rate
}

// pacedWALPerEvent is the outbox's own WAL per event of a paced run: the
// write's and the relay's at the run's events per claim.
func (in *Inputs) pacedWALPerEvent(p CapPaced) float64 {
	return in.WriteWAL + in.relayWAL(math.Max(1, p.EventsPerClaim))
}

// DefaultBackground is the background share assumed when it could not be
// measured (a shared server): the scratch cluster of the validation
// (docs/SCALING.md) measured 0.0024 to 0.0025 of the backends' CPU over
// measurements of seconds, which a timed checkpoint's writes rarely fall
// into; 1 % leaves room for them.
const DefaultBackground = 0.01

// Scenario is what the model is asked.
type Scenario struct {
	// layout picks the inputs (buildLayoutInputs); the prediction's
	// inputs say which they are.
	layout   string
	Cores    float64 `json:"cores"`
	CPUShare float64 `json:"cpu_share"`
	// Rate is the peak events/s to size for, AvgRate the average (WAL per
	// day, table size); 0 for AvgRate means Rate.
	Rate    float64 `json:"events_per_second"`
	AvgRate float64 `json:"avg_events_per_second"`
	// RetentionHours of published events kept.
	RetentionHours float64 `json:"retention_hours"`
	// Wakeup is "wal", "listen" or "poll": the per-event costs of that
	// mode (walsender, writers' notification).
	Wakeup string `json:"wakeup"`
	// Relay processes: Batch, Concurrency, the cores each has and the
	// utilisation to plan them for; Transport names its publish costs,
	// PublishMs overrides the publish time (a remote broker's round trip).
	Batch       int     `json:"batch"`
	Concurrency int     `json:"concurrency"`
	RelayCores  float64 `json:"relay_cores"`
	RelayUtil   float64 `json:"relay_utilisation"`
	Transport   string  `json:"transport"`
	PublishMs   float64 `json:"publish_ms"`
	// OtherWALMiBps is the database's WAL besides the outbox's, MiB/s,
	// which every WAL stream decodes too.
	OtherWALMiBps float64 `json:"other_wal_mib_per_s"`
	// Relays fixes the number of relay processes (0: as many as needed,
	// plus one for availability).
	Relays int `json:"relays"`
	// Colocated counts the writers' and the relay's own CPU on the same
	// cores as PostgreSQL (the validation's setting, everything pinned to
	// the same cores); otherwise the cores are the database's alone.
	Colocated bool `json:"colocated"`
}

// WithDefaults fills what the caller left zero.
func (s Scenario) WithDefaults() Scenario {
	if s.CPUShare <= 0 {
		s.CPUShare = 1
	}
	if s.AvgRate <= 0 {
		s.AvgRate = s.Rate
	}
	if s.Batch <= 0 {
		s.Batch = 100
	}
	if s.Concurrency <= 0 {
		s.Concurrency = 2
	}
	if s.RelayCores <= 0 {
		s.RelayCores = 1
	}
	if s.RelayUtil <= 0 {
		s.RelayUtil = 0.5
	}
	if s.Wakeup == "" {
		s.Wakeup = "wal"
	}
	if s.Transport == "" {
		s.Transport = transportNoop
	}
	return s
}

// Prediction is the model's answer.
type Prediction struct {
	Scenario Scenario `json:"scenario"`
	// MaxRate is the most events/s the CPU share sustains, written and
	// relayed (with the relays MaxRelays the rate needs).
	MaxRate   float64 `json:"max_events_per_second"`
	MaxRelays int     `json:"relays_at_max"`
	// At the scenario's rate (when given).
	At *RatePrediction `json:"at_rate,omitempty"`
}

// RatePrediction is the model at one rate.
type RatePrediction struct {
	Rate float64 `json:"events_per_second"`
	// Batch is the events per claim each relay finds.
	Batch float64 `json:"events_per_claim"`
	// PostgreSQL CPU per event by part, µs: writing, relaying (claim and
	// settlement), the WAL senders, retention (vacuum and prune), the
	// background processes; and in total.
	WritePG     float64 `json:"write_pg_us"`
	RelayPG     float64 `json:"relay_pg_us"`
	WalsenderPG float64 `json:"walsender_pg_us"`
	// StreamDuty is the share of the time the WAL streams run (they pause
	// when events flow fast or the database's WAL is heavy).
	StreamDuty   float64 `json:"wal_stream_duty,omitempty"`
	RetentionPG  float64 `json:"retention_pg_us"`
	BackgroundPG float64 `json:"background_pg_us"`
	ColocatedGo  float64 `json:"colocated_go_us,omitempty"`
	PerEventUs   float64 `json:"cpu_us_per_event"`
	// Cores is the CPU the outbox takes at this rate, ShareUsed the part
	// of the scenario's share it is, Fits whether it is within it.
	Cores     float64 `json:"cores"`
	ShareUsed float64 `json:"share_used"`
	Fits      bool    `json:"fits"`
	// Relays: processes needed for the rate (CPU and latency), plus one
	// for availability; the relay CPU per event; the events/s one relay
	// moves at most.
	RelaysNeeded int     `json:"relays_needed"`
	Relays       int     `json:"relays"`
	RelayCPU     float64 `json:"relay_cpu_us_per_event"`
	RelayCap     float64 `json:"relay_max_events_per_second"`
	// Connections the relays hold: pools and wake-up connections (WAL
	// senders with the WAL wake-up, which also use replication slots).
	Connections int `json:"connections"`
	WalSenders  int `json:"wal_senders"`
	// WAL written per day at the average rate, GiB, and per event, bytes.
	WALPerEvent  float64 `json:"wal_bytes_per_event"`
	WALGiBPerDay float64 `json:"wal_gib_per_day"`
	// The outbox table under the retention, GiB: after VACUUM, and with
	// the dead row versions VACUUM has not reclaimed yet.
	TableGiB      float64 `json:"table_gib"`
	TableGiBBloat float64 `json:"table_gib_before_vacuum"`
	RowsKept      float64 `json:"rows_kept"`
}

// relay pacing and WAL stream pauses, as core.Relay and the store do them
// (core/relay.go, postgres/wal.go).
const (
	modelPaceFrom  = 1500.0   // paceFrom
	modelMaxPace   = 0.010    // maxPace, seconds
	modelBusyRate  = 2000.0   // busyRate: commits/s that pause a stream
	modelBusyDuty  = 1.0 / 11 // busyFor / (busyFor + busyPause): the share of time a busy stream runs
	modelCostlyWAL = 16.0     // costlyRate, MiB/s of WAL that pause a stream for a minute
	modelCostly    = 5.0 / 65 // costlyFor / (costlyFor + costlyPause)
)

// wakeup is mode's cost, falling back to the other modes' when it was not
// measured.
func (in *Inputs) wakeup(mode string) WakeupCost {
	if w, ok := in.Wakeups[mode]; ok && w.Runs > 0 {
		return w
	}
	for _, m := range []string{"wal", "listen", "poll"} {
		if w, ok := in.Wakeups[m]; ok && w.Runs > 0 {
			w.NotifyPG = 0
			return w
		}
	}
	// Nothing measured: one event per claim, one more look each.
	return WakeupCost{TauMs: 0, Looks: 1, RoundPG: in.RelayRoundPG}
}

// batchAt is the events per claim of a relay seeing r events/s.
func (in *Inputs) batchAt(r float64, batch int, w WakeupCost) float64 {
	tau := w.TauMs
	if r < modelPaceFrom && w.TauMsLow > 0 {
		tau = w.TauMsLow
	}
	b := r * tau / 1e3
	if r >= modelPaceFrom {
		b = math.Max(b, r*math.Min(modelMaxPace, r*1e-6))
	}
	return math.Max(1, math.Min(float64(batch), b))
}

// relayPGMode is the relay's PostgreSQL CPU per event at per-relay rate r
// with wake-up w: full batches pipelined (the drains' cost), or rounds of
// b events plus the empty looks between them.
func (in *Inputs) relayPGMode(r float64, batch int, w WakeupCost) (pg, b float64) {
	b = in.batchAt(r, batch, w)
	if b >= float64(batch) {
		return in.RelayEventPG + in.RelayRoundPG/b, b
	}
	found := r / b // claims a second that find events
	looks, round := w.Looks, w.RoundPG
	if r < modelPaceFrom && w.RoundPGLow > 0 {
		looks, round = w.LooksLow, w.RoundPGLow
	}
	empty := looks * found
	if w.PollRate > 0 {
		empty = math.Max(0, w.PollRate-found)
	}
	if round <= 0 {
		round = in.RelayRoundPG
	}
	return in.RelayEventPG + (round*found+in.EmptyClaimPG*empty)/r, b
}

// streamDuty is the share of the time a WAL stream runs at rate r with
// dbWAL MiB/s of the database's WAL: it pauses when events flow fast or
// when decoding costs too much (postgres/wal.go).
func streamDuty(r, dbWAL float64) float64 {
	d := 1.0
	if r >= modelBusyRate {
		d = modelBusyDuty
	}
	if dbWAL >= modelCostlyWAL {
		d = math.Min(d, modelCostly)
	}
	return d
}

// relayPG is the relay's PostgreSQL CPU per event at per-relay rate r for
// the scenario's wake-up, and the WAL streams' duty: a WAL stream that
// pauses leaves the relay polling.
func (in *Inputs) relayPG(s Scenario, r, total, dbWAL float64) (pg, b, duty float64) {
	if s.Wakeup != "wal" {
		pg, b = in.relayPGMode(r, s.Batch, in.wakeup(s.Wakeup))
		return pg, b, 0
	}
	// Every stream sees every commit of the table, whichever relay
	// claims it (one event per transaction assumed).
	duty = streamDuty(total, dbWAL)
	pg, b = in.relayPGMode(r, s.Batch, in.wakeup("wal"))
	if duty < 1 {
		ppg, pb := in.relayPGMode(r, s.Batch, in.wakeup("poll"))
		pg, b = duty*pg+(1-duty)*ppg, duty*b+(1-duty)*pb
	}
	return pg, b, duty
}

// relayCPU is the relay process's CPU per event at b events per claim.
func (in *Inputs) relayCPU(b float64, transport string) float64 {
	return in.RelayEventGo + in.RelayRoundGo/b + in.Transports[transport].ExtraCPU
}

// relayWAL is the relay's WAL per event at b events per claim.
func (in *Inputs) relayWAL(b float64) float64 { return in.RelayEventWAL + in.RelayRoundWAL/b }

func (in *Inputs) background() float64 {
	if in.BackgroundMeasured || in.Background > 0 {
		return in.Background
	}
	return DefaultBackground
}

// relayCap is the most events/s one relay process moves: Concurrency
// batches in flight, each a round of database calls and a publish.
func (in *Inputs) relayCap(s Scenario) float64 {
	b := float64(s.Batch)
	pub := s.PublishMs
	if pub <= 0 {
		pub = in.Transports[s.Transport].PublishMs
	}
	round := in.RelayRoundMs + in.RelayEventMs*b + pub
	if round <= 0 {
		return math.Inf(1)
	}
	return float64(s.Concurrency) * b / (round / 1e3)
}

// relaysFor is how many relay processes rate needs (CPU and latency),
// with b events per claim.
func (in *Inputs) relaysFor(s Scenario, rate, b float64) int {
	n := 1
	if cpu := rate * in.relayCPU(b, s.Transport) / (s.RelayCores * 1e6 * s.RelayUtil); cpu > 1 {
		n = int(math.Ceil(cpu))
	}
	if c := in.relayCap(s); rate > c {
		n = max(n, int(math.Ceil(rate/c)))
	}
	return n
}

// At is the model at one rate.
func (in *Inputs) At(s Scenario, rate float64) RatePrediction {
	s = s.WithDefaults()
	p := RatePrediction{Rate: rate}
	// Relays: sized with the batches one relay would see, then the
	// batches of the relays there are.
	_, b1, _ := in.relayPG(s, rate, rate, s.OtherWALMiBps)
	p.RelaysNeeded = in.relaysFor(s, rate, b1)
	p.Relays = s.Relays
	if p.Relays <= 0 {
		p.Relays = p.RelaysNeeded + 1 // one more, so a relay's death is not an outage
	}
	r := rate / float64(p.Relays)
	// The database's WAL, which the WAL streams decode: the outbox's and
	// the rest (OtherWALMiBps).
	_, b0, _ := in.relayPG(s, r, rate, s.OtherWALMiBps)
	outboxWAL := in.WriteWAL + in.relayWAL(b0) + in.VacuumWAL + in.PruneWAL + in.PruneVacuumWAL
	dbWAL := rate*outboxWAL/(1<<20) + s.OtherWALMiBps
	var b, duty float64
	p.RelayPG, b, duty = in.relayPG(s, r, rate, dbWAL)
	p.Batch = b
	p.WritePG = in.WritePG
	switch s.Wakeup {
	case "wal":
		// Every relay's WAL sender decodes all of the database's WAL,
		// while its stream runs.
		if rate > 0 {
			p.WalsenderPG = float64(p.Relays) * duty * in.walsenderAt(rate, s.OtherWALMiBps*1024)
		}
		p.WalSenders = p.Relays
		p.StreamDuty = duty
	case "listen":
		p.WritePG += in.wakeup("listen").NotifyPG
	}
	p.RetentionPG = in.VacuumPG + in.PrunePG + in.PruneVacuumPG
	if s.Colocated {
		// The whole business transaction, the writers' client and the
		// relay process, all on the same cores.
		p.WritePG = in.TxWithEventPG
		if s.Wakeup == "listen" {
			p.WritePG += in.wakeup("listen").NotifyPG
		}
		p.RetentionPG = 0 // a validation run prunes nothing
		p.ColocatedGo = in.TxWithEventGo + in.relayCPU(b, s.Transport)
	}
	pg := p.WritePG + p.RelayPG + p.WalsenderPG + p.RetentionPG
	p.BackgroundPG = pg * in.background()
	p.PerEventUs = pg + p.BackgroundPG + p.ColocatedGo
	// Idle relays poll about twice a second whatever the rate.
	idle := float64(p.Relays) * 2 * in.EmptyClaimPG
	p.Cores = (rate*p.PerEventUs + idle) / 1e6
	budget := s.Cores * s.CPUShare
	p.ShareUsed = p.Cores / budget
	p.Fits = p.Cores <= budget
	p.RelayCPU = in.relayCPU(b, s.Transport)
	p.RelayCap = in.relayCap(s)
	p.Connections = p.Relays * (s.Concurrency + 1)
	if s.Wakeup != "poll" {
		p.Connections += p.Relays
	}
	avg := s.AvgRate
	if avg <= 0 {
		avg = rate
	}
	_, bAvg, _ := in.relayPG(s, avg/float64(p.Relays), avg, s.OtherWALMiBps)
	p.WALPerEvent = in.WriteWAL + in.relayWAL(bAvg) + in.VacuumWAL + in.PruneWAL + in.PruneVacuumWAL
	p.WALGiBPerDay = avg * 86400 * p.WALPerEvent / (1 << 30)
	p.RowsKept = avg * s.RetentionHours * 3600
	switch in.Layout {
	case "hourly":
		p.RowsKept += avg * 3600 // a partition goes once all of it is past the retention
	case "daily":
		p.RowsKept += avg * 86400
	}
	p.TableGiB = p.RowsKept * (in.HeapBytes + in.IndexBytes) / (1 << 30)
	p.TableGiBBloat = p.RowsKept * math.Max(in.BloatedBytes, in.HeapBytes+in.IndexBytes) / (1 << 30)
	return p
}

// Predict answers a scenario: the most events/s the share sustains, and
// the model at the scenario's rate.
func (in *Inputs) Predict(s Scenario) Prediction {
	s = s.WithDefaults()
	p := Prediction{Scenario: s}
	if in.WritePG+in.RelayEventPG+in.RelayRoundPG <= 0 {
		return p // nothing measured: no maximum
	}
	budget := s.Cores * s.CPUShare
	// The cost per event falls as batches grow with the rate, so the CPU
	// needed is not monotonic in the rate near paceFrom: scan a fine
	// logarithmic grid for the largest rate that fits, then refine.
	last := 0.0
	for r := 10.0; r < 1e8; r *= 1.01 {
		if in.At(s, r).Cores <= budget {
			last = r
		}
	}
	if last > 0 {
		lo, hi := last, last*1.01
		for i := 0; i < 40; i++ {
			mid := (lo + hi) / 2
			if in.At(s, mid).Cores <= budget {
				lo = mid
			} else {
				hi = mid
			}
		}
		last = lo
	}
	p.MaxRate = last
	if last > 0 {
		p.MaxRelays = in.At(s, last).Relays
	}
	if s.Rate > 0 {
		at := in.At(s, s.Rate)
		p.At = &at
	}
	return p
}

// --- building the inputs from the measurements ---

// fitInverse fits y = v + f/x by least squares on the relative error (the
// points span two orders of magnitude) and returns v, f and the largest
// relative deviation of a point from the fit.
func fitInverse(xs, ys []float64) (v, f, maxErr float64) {
	// Minimise Σ ((v + f·u − y)/y)² with u = 1/x.
	var s11, s12, s22, t1, t2 float64
	for i := range xs {
		if ys[i] <= 0 {
			continue
		}
		w := 1 / (ys[i] * ys[i])
		u := 1 / xs[i]
		s11 += w
		s12 += w * u
		s22 += w * u * u
		t1 += w * ys[i]
		t2 += w * ys[i] * u
	}
	det := s11*s22 - s12*s12
	switch {
	case det == 0 && s11 > 0:
		return t1 / s11, 0, 0
	case det == 0:
		return 0, 0, 0
	}
	v = (t1*s22 - t2*s12) / det
	f = (s11*t2 - s12*t1) / det
	if v < 0 || f < 0 {
		// A negative part is noise around zero: fit the other alone.
		if v < 0 {
			v, f = 0, t2/s22
		} else {
			v, f = t1/s11, 0
		}
	}
	for i := range xs {
		if ys[i] > 0 {
			maxErr = math.Max(maxErr, math.Abs(v+f/xs[i]-ys[i])/ys[i])
		}
	}
	return v, f, maxErr
}

// fitLine fits y = slope·x + intercept by least squares and returns the
// slope and the intercept; with one distinct x (or a negative part, which
// is noise around zero) all of y goes to the slope, through the origin.
func fitLine(xs, ys []float64) (slope, intercept float64) {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	if det := n*sxx - sx*sx; det > 1e-9*sxx*n {
		slope = (n*sxy - sx*sy) / det
		intercept = (sy - slope*sx) / n
		if slope >= 0 && intercept >= 0 {
			return slope, intercept
		}
	}
	if sxx == 0 {
		return 0, 0
	}
	return sxy / sxx, 0
}

// medianOf is the median of f over the items, NaN for none.
func medianOf[T any](items []T, f func(T) float64) float64 {
	vals := make([]float64, 0, len(items))
	for _, it := range items {
		vals = append(vals, f(it))
	}
	return median(vals)
}

func plainLayout(l string) bool { return l == "" || l == "plain" }

// reached is the rate a paced run's writers kept (the one asked for when
// it was not recorded).
func (p CapPaced) reached() float64 {
	if p.Reached > 0 {
		return p.Reached
	}
	return float64(p.Rate)
}

// buildLayoutInputs is buildInputs for the outbox table in layout ("plain",
// "hourly", "daily"): the plain layout's inputs, with what the layout's own
// measurements changed (writes, the relay's cost per event at the batch
// size drained, retention by dropping partitions instead of deleting
// rows). A daily layout was not measured: it takes the hourly one's costs.
func buildLayoutInputs(r *CapacityReport, wakeup, layout string) (Inputs, []string) {
	in, notes := buildInputs(r, wakeup)
	in.Layout = "plain"
	if plainLayout(layout) {
		return in, notes
	}
	measured := "hourly"
	var ws []CapWrite
	for _, w := range r.Write {
		if w.Layout == measured && w.EventsPerTx == 1 {
			ws = append(ws, w)
		}
	}
	var ds []CapDrain
	for _, d := range r.Drains {
		if d.Layout == measured && d.Transport == transportNoop {
			ds = append(ds, d)
		}
	}
	var rs []CapRetention
	for _, x := range r.Retention {
		if x.Layout == measured {
			rs = append(rs, x)
		}
	}
	if len(ws) == 0 || len(ds) == 0 || len(rs) == 0 {
		notes = append(notes, fmt.Sprintf("the %s layout was not measured (-capacity-partitioned): the plain layout's costs stand in", layout))
		return in, notes
	}
	in.Layout = layout
	in.WritePG += medianOf(ws, func(w CapWrite) float64 { return w.PGPerTx }) - in.TxWithEventPG
	in.TxWithEventPG = medianOf(ws, func(w CapWrite) float64 { return w.PGPerTx })
	in.WriteWAL = medianOf(ws, func(w CapWrite) float64 { return w.WALOutboxPerTx })
	b := float64(ds[0].Batch)
	in.RelayEventPG += medianOf(ds, func(d CapDrain) float64 { return d.PGPerEv }) - (in.RelayEventPG + in.RelayRoundPG/b)
	in.RelayEventWAL += medianOf(ds, func(d CapDrain) float64 { return d.WALPerEv + d.WALCommitPerEv }) - in.relayWAL(b)
	in.RelayEventGo += medianOf(ds, func(d CapDrain) float64 { return d.GoPerEv }) - (in.RelayEventGo + in.RelayRoundGo/b)
	// Dropping a partition replaces the prune and the VACUUM after it; the
	// VACUUM of the claims' and settlements' dead versions stays.
	in.PrunePG = medianOf(rs, func(x CapRetention) float64 { return x.PrunePGPerEv })
	in.PruneWAL = medianOf(rs, func(x CapRetention) float64 { return x.PruneWALPerEv + x.PruneFPIPerEv })
	in.PruneVacuumPG, in.PruneVacuumWAL = 0, 0
	if measured != layout {
		notes = append(notes, fmt.Sprintf("the %s layout takes the hourly layout's measured costs", layout))
	}
	return in, notes
}

// buildInputs derives the model's inputs from a report's measurements;
// wakeup picks the paced runs whose behaviour the model uses.
func buildInputs(r *CapacityReport, wakeup string) (Inputs, []string) {
	var in Inputs
	var notes []string
	byCase := func(events int, notify string) []CapWrite {
		var out []CapWrite
		for _, w := range r.Write {
			if w.EventsPerTx == events && w.Notify == notify && plainLayout(w.Layout) {
				out = append(out, w)
			}
		}
		return out
	}
	base, one, ten, notif := byCase(0, "NotifyNone"), byCase(1, "NotifyNone"), byCase(10, "NotifyNone"), byCase(1, "NotifyAfterCommit")
	if len(base) > 0 && len(one) > 0 {
		b := medianOf(base, func(w CapWrite) float64 { return w.PGPerTx })
		in.WritePG = medianOf(one, func(w CapWrite) float64 { return w.PGPerTx }) - b
		in.WriteWAL = medianOf(one, func(w CapWrite) float64 { return w.WALOutboxPerTx })
		in.AddRoundTrips = medianOf(one, func(w CapWrite) float64 { return w.TurnsPerTx }) - medianOf(base, func(w CapWrite) float64 { return w.TurnsPerTx })
		in.TxWithEventPG = medianOf(one, func(w CapWrite) float64 { return w.PGPerTx })
		in.TxWithEventGo = medianOf(one, func(w CapWrite) float64 { return w.GoPerTx })
		in.TxCommitWAL = medianOf(one, func(w CapWrite) float64 { return w.WALCommitPerTx })
		if len(ten) > 0 {
			in.WritePG10 = (medianOf(ten, func(w CapWrite) float64 { return w.PGPerTx }) - b) / 10
			in.WriteWAL10 = medianOf(ten, func(w CapWrite) float64 { return w.WALOutboxPerTx }) / 10
		}
		if len(notif) > 0 {
			in.WriteNotifyPG = math.Max(0, medianOf(notif, func(w CapWrite) float64 { return w.PGPerTx })-in.TxWithEventPG)
		}
	} else {
		notes = append(notes, "no writer measurement: the writers' costs are 0 in the model")
	}
	// Drains through the no-op publisher, per batch size.
	perBatch := map[int][]CapDrain{}
	for _, d := range r.Drains {
		if d.Transport == transportNoop && plainLayout(d.Layout) {
			perBatch[d.Batch] = append(perBatch[d.Batch], d)
		}
	}
	var batches []int
	for b := range perBatch {
		batches = append(batches, b)
	}
	sort.Ints(batches)
	var xs, pg, gocpu, wal, ms []float64
	for _, b := range batches {
		ds := perBatch[b]
		xs = append(xs, float64(b))
		pg = append(pg, medianOf(ds, func(d CapDrain) float64 { return d.PGPerEv }))
		gocpu = append(gocpu, medianOf(ds, func(d CapDrain) float64 { return d.GoPerEv }))
		wal = append(wal, medianOf(ds, func(d CapDrain) float64 { return d.WALPerEv + d.WALCommitPerEv }))
		ms = append(ms, medianOf(ds, func(d CapDrain) float64 { return (d.RoundMs - d.PublishMs) / float64(d.Batch) }))
	}
	switch len(xs) {
	case 0:
		notes = append(notes, "no drain: the relay's costs are 0 in the model")
	case 1:
		notes = append(notes, fmt.Sprintf("one batch size drained (%d): the relay's cost per claim round cannot be told from its cost per event; all of it counts per event", batches[0]))
		in.RelayEventPG, in.RelayEventGo, in.RelayEventWAL, in.RelayEventMs = pg[0], gocpu[0], wal[0], ms[0]
	default:
		in.RelayEventPG, in.RelayRoundPG, in.RelayFitError = fitInverse(xs, pg)
		in.RelayEventGo, in.RelayRoundGo, _ = fitInverse(xs, gocpu)
		in.RelayEventWAL, in.RelayRoundWAL, _ = fitInverse(xs, wal)
		in.RelayEventMs, in.RelayRoundMs, _ = fitInverse(xs, ms)
	}
	if ds := perBatch[slices.Max(append(batches, 0))]; len(ds) > 0 {
		in.RoundTripsFull = medianOf(ds, func(d CapDrain) float64 { return d.TurnsPerClaim })
	}
	// Transports at one batch size, against the no-op publisher's.
	in.Transports = map[string]TransportCost{transportNoop: {}}
	for _, d := range r.Drains {
		if d.Transport == transportNoop {
			continue
		}
		in.TransportBatch = d.Batch
	}
	for _, tname := range capTransports[1:] {
		var ts []CapDrain
		for _, d := range r.Drains {
			if d.Transport == tname {
				ts = append(ts, d)
			}
		}
		if len(ts) == 0 {
			continue
		}
		b := ts[0].Batch
		noop := perBatch[b]
		extra := medianOf(ts, func(d CapDrain) float64 { return d.GoPerEv })
		if len(noop) > 0 {
			extra -= medianOf(noop, func(d CapDrain) float64 { return d.GoPerEv })
		} else {
			extra -= in.RelayEventGo + in.RelayRoundGo/float64(b)
		}
		in.Transports[tname] = TransportCost{ExtraCPU: math.Max(0, extra), PublishMs: medianOf(ts, func(d CapDrain) float64 { return d.PublishMs })}
	}
	if len(r.Empty) > 0 {
		in.EmptyClaimPG = medianOf(r.Empty, func(e CapEmpty) float64 { return e.PGPerClaim })
	}
	// Paced runs, per wake-up: how events gather per claim (TauMs), the
	// empty looks or the polling rate, and what a round that is not full
	// costs beyond its events (the rest of the relay's CPU, the WAL
	// sender's and the empty claims' taken out).
	in.Wakeups = map[string]WakeupCost{}
	var wsRates, wsCPU []float64 // rate, and CPU per second of the WAL sender
	for _, mode := range []string{"wal", "listen", "poll"} {
		var ps []CapPaced
		for _, p := range r.Paced {
			if p.Wakeup == mode && p.Events > 0 {
				ps = append(ps, p)
			}
		}
		if len(ps) == 0 {
			continue
		}
		w := WakeupCost{Runs: len(ps)}
		tauOf := func(p CapPaced) float64 { return 1e3 * p.EventsPerClaim / p.reached() }
		found := func(p CapPaced) float64 { return math.Max(p.ClaimsPerEv-p.EmptyPerEv, 1e-9) }
		if mode == "poll" {
			w.PollRate = medianOf(ps, func(p CapPaced) float64 { return p.ClaimsPerEv * p.reached() })
		}
		roundOf := func(p CapPaced) float64 {
			rest := p.PGPerEv - p.WalsenderPerEv - in.RelayEventPG - in.EmptyClaimPG*p.EmptyPerEv
			return math.Max(0, rest/found(p))
		}
		looksOf := func(p CapPaced) float64 { return p.EmptyPerEv / found(p) }
		var low, high []CapPaced
		for _, p := range ps {
			if p.reached() < modelPaceFrom {
				low = append(low, p)
			} else {
				high = append(high, p)
			}
		}
		switch {
		case len(low) > 0 && len(high) > 0:
			w.TauMs, w.TauMsLow = medianOf(high, tauOf), medianOf(low, tauOf)
			w.RoundPG, w.RoundPGLow = medianOf(high, roundOf), medianOf(low, roundOf)
			w.Looks, w.LooksLow = medianOf(high, looksOf), medianOf(low, looksOf)
		default:
			w.TauMs, w.RoundPG, w.Looks = medianOf(ps, tauOf), medianOf(ps, roundOf), medianOf(ps, looksOf)
			w.TauMsLow, w.RoundPGLow, w.LooksLow = w.TauMs, w.RoundPG, w.Looks
		}
		if mode == "poll" {
			w.Looks, w.LooksLow = 0, 0
		}
		if mode == "listen" {
			// The writers' after-commit notifications: from the writer
			// measurement, else the paced writers' against the others'.
			w.NotifyPG = in.WriteNotifyPG
			if len(notif) == 0 {
				var others []CapPaced
				for _, q := range r.Paced {
					if q.WriterNotify == "NotifyNone" {
						others = append(others, q)
					}
				}
				if len(others) > 0 {
					w.NotifyPG = math.Max(0, medianOf(ps, func(p CapPaced) float64 { return p.WriterPGPerEv })-medianOf(others, func(p CapPaced) float64 { return p.WriterPGPerEv }))
				}
			}
		}
		in.Wakeups[mode] = w
		for _, p := range ps {
			if mode == "wal" && p.WakeupSeen == wakeupWAL && p.WalsenderPerEv > 0 {
				// What the WAL sender spent on the events it streamed:
				// its CPU less what decoding everyone else's WAL of the
				// window cost (a shared server writes more than the run).
				other := math.Max(0, p.ServerWALKiB-float64(p.Events)*in.pacedWALPerEvent(p)/1024)
				own := math.Max(0, p.WalsenderPerEv-DefaultWalsenderPerKiB*other/float64(p.Events))
				wsRates, wsCPU = append(wsRates, p.reached()), append(wsCPU, own*p.reached())
			}
		}
	}
	in.WalsenderPerKiB = DefaultWalsenderPerKiB
	if len(wsRates) > 0 {
		in.WalsenderPerEvent, in.WalsenderFixed = fitLine(wsRates, wsCPU)
	} else if wakeup == "wal" {
		notes = append(notes, "no paced run streamed WAL: the WAL senders' cost is 0 in the model")
	}
	if _, ok := in.Wakeups[wakeup]; !ok {
		notes = append(notes, fmt.Sprintf("no paced run of the %s wake-up: its behaviour below full batches is taken from another mode's, or assumed (one event and one more look per claim)", wakeup))
	}
	var rt []CapRetention
	for _, x := range r.Retention {
		if plainLayout(x.Layout) {
			rt = append(rt, x)
		}
	}
	if len(rt) > 0 {
		in.VacuumPG = medianOf(rt, func(x CapRetention) float64 { return x.VacuumPGPerEv })
		in.VacuumWAL = medianOf(rt, func(x CapRetention) float64 { return x.VacuumWALPerEv })
		in.PrunePG = medianOf(rt, func(x CapRetention) float64 { return x.PrunePGPerEv })
		in.PruneWAL = medianOf(rt, func(x CapRetention) float64 { return x.PruneWALPerEv + x.PruneFPIPerEv })
		in.PruneVacuumPG = medianOf(rt, func(x CapRetention) float64 { return x.PruneVacuumPGPerEv })
		in.PruneVacuumWAL = medianOf(rt, func(x CapRetention) float64 { return x.PruneVacuumWALPerEv })
		in.HeapBytes = medianOf(rt, func(x CapRetention) float64 { return x.HeapBytes })
		in.IndexBytes = medianOf(rt, func(x CapRetention) float64 { return x.IndexBytes })
		in.BloatedBytes = medianOf(rt, func(x CapRetention) float64 { return x.HeapBytesBefore + x.IndexBytesBefore })
		in.ProcessedBytes = medianOf(rt, func(x CapRetention) float64 { return x.ProcessedBytes })
	}
	for _, cs := range []struct {
		name string
		dst  *float64
	}{{consumerDedupe, &in.DedupePG}, {consumerSequence, &in.SequencerPG}, {consumerAccept, &in.AcceptPG}, {consumerInboxWorker, &in.InboxWorkerPG}} {
		var m []CapConsumer
		for _, c := range r.Consumer {
			if c.Case == cs.name {
				m = append(m, c)
			}
		}
		if len(m) > 0 {
			*cs.dst = medianOf(m, func(c CapConsumer) float64 { return c.PGPerEv })
			if cs.name == consumerDedupe {
				in.DedupeWAL = medianOf(m, func(c CapConsumer) float64 { return c.WALPerEv })
			}
		}
	}
	if r.Server.BackgroundShare > 0 && r.Server.BackgroundAttributable {
		in.Background, in.BackgroundMeasured = r.Server.BackgroundShare, true
	} else {
		in.Background = DefaultBackground
	}
	return in, notes
}
