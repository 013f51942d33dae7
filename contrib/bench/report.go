package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Report is everything one run measured.
type Report struct {
	Env     Env       `json:"env"`
	Options RunConfig `json:"options"`
	Series  []*Series `json:"series"`
	Ratios  []*Ratio  `json:"ratios"`
	Targets []Target  `json:"targets"`
	Checks  []Check   `json:"checks"`
	Notes   []string  `json:"notes,omitempty"`
}

// RunConfig records the options a run used.
type RunConfig struct {
	Workloads       []string `json:"workloads"`
	Events          int      `json:"events"`
	Reps            int      `json:"reps"`
	Batches         []int    `json:"batches"`
	Rates           []int    `json:"rates"`
	LatencySeconds  float64  `json:"latency_seconds"`
	WriteSeconds    float64  `json:"write_seconds"`
	Writers         int      `json:"writers"`
	Procs           []int    `json:"procs"`
	ProcsBatch      int      `json:"procs_batch"`
	QStashBatch     int      `json:"qstash_batch"`
	QStashConc      int      `json:"qstash_concurrency"`
	IdleSeconds     float64  `json:"idle_seconds"`
	GrowthEvents    int      `json:"growth_events"`
	GrowthRetained  int      `json:"growth_retained"`
	ConsumerRates   []int    `json:"consumer_rates"`
	ConsumerSeconds float64  `json:"consumer_seconds"`
	ConsumerSenders int      `json:"consumer_senders"`
	ConsumerClosed  int      `json:"consumer_closed"`
	WallSeconds     float64  `json:"wall_seconds"`
	PreloadMethod   string   `json:"preload_method"`
	CommandLineArgs []string `json:"args"`
	// River is the comparator's version and configurations (nil without
	// -river).
	River *RiverConfig `json:"river,omitempty"`
}

// RiverConfig records which River ran and how.
type RiverConfig struct {
	Version  string `json:"version"`
	Defaults string `json:"defaults"`
	Tuned    string `json:"tuned"`
}

// Series is one measured quantity of one system in one case, one value per
// repetition.
type Series struct {
	Workload string    `json:"workload"`
	Case     string    `json:"case"`
	System   string    `json:"system"`
	Metric   string    `json:"metric"`
	Values   []float64 `json:"values"`
	Median   float64   `json:"median"`
}

// Ratio is num/den computed per repetition (the two measured side by side),
// and the median of those ratios.
type Ratio struct {
	Workload string    `json:"workload"`
	Case     string    `json:"case"`
	Name     string    `json:"name"`
	Metric   string    `json:"metric"`
	Values   []float64 `json:"values"`
	Median   float64   `json:"median"`
}

// Target is one of the goals with the measured median.
type Target struct {
	Name      string  `json:"name"`
	Value     float64 `json:"value"`
	Op        string  `json:"op"` // ">=", "<=", ">" or "<"
	Threshold float64 `json:"threshold"`
	Unit      string  `json:"unit"`
	Met       bool    `json:"met"`
	// Margin is how far the value is past (positive) or short of (negative)
	// the threshold, relative to the threshold.
	Margin float64 `json:"margin"`
	Found  bool    `json:"found"`
	// Versus names what the threshold was measured on, when it is another
	// system's median in the same run rather than a fixed goal.
	Versus string `json:"versus,omitempty"`
}

// Check is a correctness assertion made during the run (every event
// arrived, no double publish under a lease).
type Check struct {
	Workload string `json:"workload"`
	Case     string `json:"case"`
	System   string `json:"system"`
	Rep      int    `json:"rep"`
	OK       bool   `json:"ok"`
	Detail   string `json:"detail"`
}

func (r *Report) add(workload, cas, system, metric string, v float64) {
	for _, s := range r.Series {
		if s.Workload == workload && s.Case == cas && s.System == system && s.Metric == metric {
			s.Values = append(s.Values, v)
			s.Median = median(s.Values)
			return
		}
	}
	r.Series = append(r.Series, &Series{Workload: workload, Case: cas, System: system, Metric: metric, Values: []float64{v}, Median: v})
}

func (r *Report) find(workload, cas, system, metric string) *Series {
	for _, s := range r.Series {
		if s.Workload == workload && s.Case == cas && s.System == system && s.Metric == metric {
			return s
		}
	}
	return nil
}

func (r *Report) check(c Check) { r.Checks = append(r.Checks, c) }

// ratio adds num/den per repetition for two series of one case.
func (r *Report) ratio(workload, cas, name, metric, numSys, denSys string) *Ratio {
	return r.ratioOf(workload, name, metric, cas, numSys, cas, denSys)
}

// ratioOf is ratio across cases (for instance 4 processes over 1).
func (r *Report) ratioOf(workload, name, metric, numCase, numSys, denCase, denSys string) *Ratio {
	num, den := r.find(workload, numCase, numSys, metric), r.find(workload, denCase, denSys, metric)
	if num == nil || den == nil {
		return nil
	}
	n := min(len(num.Values), len(den.Values))
	q := &Ratio{Workload: workload, Case: numCase, Name: name, Metric: metric}
	for i := 0; i < n; i++ {
		if den.Values[i] != 0 {
			q.Values = append(q.Values, num.Values[i]/den.Values[i])
		}
	}
	if len(q.Values) == 0 {
		return nil
	}
	q.Median = median(q.Values)
	r.Ratios = append(r.Ratios, q)
	return q
}

func (r *Report) findRatio(workload, cas, name string) *Ratio {
	for _, q := range r.Ratios {
		if q.Workload == workload && q.Case == cas && q.Name == name {
			return q
		}
	}
	return nil
}

// target records a goal against a measured median (found=false when the
// workload did not run).
func (r *Report) target(name string, v float64, found bool, op string, threshold float64, unit string) {
	t := Target{Name: name, Value: v, Op: op, Threshold: threshold, Unit: unit, Found: found}
	if found {
		switch op {
		case ">=":
			t.Met = v >= threshold
		case ">":
			t.Met = v > threshold
		case "<=":
			t.Met = v <= threshold
		case "<":
			t.Met = v < threshold
		}
		switch {
		case threshold == 0:
			// A comparison with a median of 0 has no relative margin.
		case op == ">=" || op == ">":
			t.Margin = v/threshold - 1
		default:
			t.Margin = 1 - v/threshold
		}
	}
	r.Targets = append(r.Targets, t)
}

// targetVersus records a goal whose threshold is another system's median
// of the same run (found=false when either side did not run).
func (r *Report) targetVersus(name string, v float64, found bool, op string, threshold float64, unit, versus string) {
	r.target(name, v, found, op, threshold, unit)
	r.Targets[len(r.Targets)-1].Versus = versus
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func (r *Report) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// writeTables prints markdown tables: the environment, one table per
// workload (medians, with the range over repetitions), ratios, targets and
// checks.
func (r *Report) writeTables(w io.Writer) {
	e := r.Env
	fmt.Fprintf(w, "## Environment\n\n")
	fmt.Fprintf(w, "- machine: %d CPUs (%s), %s memory, GOMAXPROCS %d, %s\n", e.NumCPU, e.CPUModel, e.Memory, e.GOMAXPROCS, e.GoVersion)
	fmt.Fprintf(w, "- load average: %s before, %s after\n", e.LoadBefore, e.LoadAfter)
	fmt.Fprintf(w, "- %s\n", e.PGVersion)
	if len(e.PGSettings) > 0 {
		fmt.Fprintf(w, "- PostgreSQL settings not at their defaults: %s\n", strings.Join(e.PGSettings, ", "))
	}
	fmt.Fprintf(w, "- run: %s, %d repetition(s), %.0f s wall, %s\n", strings.Join(r.Options.Workloads, ","), r.Options.Reps, r.Options.WallSeconds, r.Options.PreloadMethod)
	if rv := r.Options.River; rv != nil {
		fmt.Fprintf(w, "- River %s: defaults: %s; tuned: %s\n", rv.Version, rv.Defaults, rv.Tuned)
	}
	fmt.Fprintln(w)

	var workloads []string
	for _, s := range r.Series {
		if !slices.Contains(workloads, s.Workload) {
			workloads = append(workloads, s.Workload)
		}
	}
	for _, wl := range workloads {
		var metrics []string
		type row struct{ cas, sys string }
		var rows []row
		for _, s := range r.Series {
			if s.Workload != wl {
				continue
			}
			if !slices.Contains(metrics, s.Metric) {
				metrics = append(metrics, s.Metric)
			}
			if !slices.Contains(rows, row{s.Case, s.System}) {
				rows = append(rows, row{s.Case, s.System})
			}
		}
		fmt.Fprintf(w, "## %s (median of repetitions; range in brackets)\n\n", wl)
		fmt.Fprintf(w, "| case | system | %s |\n", strings.Join(metrics, " | "))
		fmt.Fprintf(w, "|---|---|%s\n", strings.Repeat("---|", len(metrics)))
		for _, rw := range rows {
			cells := make([]string, len(metrics))
			for i, m := range metrics {
				if s := r.find(wl, rw.cas, rw.sys, m); s != nil {
					cells[i] = fmtSeries(s)
				}
			}
			fmt.Fprintf(w, "| %s | %s | %s |\n", rw.cas, rw.sys, strings.Join(cells, " | "))
		}
		fmt.Fprintln(w)
	}

	if len(r.Ratios) > 0 {
		fmt.Fprintf(w, "## Ratios (per repetition, then the median)\n\n| workload | case | ratio | metric | median | per repetition |\n|---|---|---|---|---|---|\n")
		for _, q := range r.Ratios {
			per := make([]string, len(q.Values))
			for i, v := range q.Values {
				per[i] = fmt.Sprintf("%.2f", v)
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | **%.2f** | %s |\n", q.Workload, q.Case, q.Name, q.Metric, q.Median, strings.Join(per, ", "))
		}
		fmt.Fprintln(w)
	}
	if len(r.Targets) > 0 {
		fmt.Fprintf(w, "## Targets\n\n| target | measured | goal | verdict |\n|---|---|---|---|\n")
		for _, t := range r.Targets {
			goal := fmt.Sprintf("%s %s %s", t.Op, fmtNum(t.Threshold), t.Unit)
			switch {
			case t.Versus != "" && !t.Found:
				goal = t.Op + " " + t.Versus
			case t.Versus != "":
				goal += " (" + t.Versus + ")"
			}
			if !t.Found {
				fmt.Fprintf(w, "| %s | not run | %s | – |\n", t.Name, goal)
				continue
			}
			// Margin's sign already says which side of the threshold the
			// value is; the words say it once.
			verdict := fmt.Sprintf("**met**, %.0f %% to spare", 100*t.Margin)
			if !t.Met {
				verdict = fmt.Sprintf("**missed** by %.0f %%", -100*t.Margin)
			}
			fmt.Fprintf(w, "| %s | %s %s | %s | %s |\n", t.Name, fmtNum(t.Value), t.Unit, goal, verdict)
		}
		fmt.Fprintln(w)
	}
	if len(r.Checks) > 0 {
		ok := 0
		for _, c := range r.Checks {
			if c.OK {
				ok++
			}
		}
		fmt.Fprintf(w, "## Checks: %d of %d passed\n\n", ok, len(r.Checks))
		for _, c := range r.Checks {
			if !c.OK || c.Workload == "scaleout" {
				status := "ok"
				if !c.OK {
					status = "FAILED"
				}
				fmt.Fprintf(w, "- %s %s %s rep %d: %s — %s\n", c.Workload, c.Case, c.System, c.Rep, status, c.Detail)
			}
		}
		fmt.Fprintln(w)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "- %s\n", n)
	}
}

func fmtSeries(s *Series) string {
	if len(s.Values) == 1 {
		return fmtNum(s.Median)
	}
	lo, hi := slices.Min(s.Values), slices.Max(s.Values)
	return fmt.Sprintf("%s (%s–%s)", fmtNum(s.Median), fmtNum(lo), fmtNum(hi))
}

// fmtNum prints large numbers with thousands separators and small ones with
// enough digits to compare.
func fmtNum(v float64) string {
	switch a := math.Abs(v); {
	case math.IsNaN(v):
		return "–"
	case a >= 1000:
		return groupThousands(strconv.FormatFloat(math.Round(v), 'f', 0, 64))
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

func groupThousands(s string) string {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
