package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The capacity mode's instruments. Each figure it reports is a count or a
// CPU time, not a wall-clock rate, because the machine it runs on is
// shared: another process's load moves throughput by tens of percent and a
// backend's CPU time per event by a few.
//
//   - PostgreSQL CPU: the run time of each backend serving the connections
//     under measurement, from /proc/<pid>/schedstat (nanoseconds; the
//     10 ms ticks of /proc/<pid>/stat when schedstat is missing), found by
//     application_name, so a connection opened mid-run (the WAL stream's)
//     is counted too. Only when the server runs on this host: a backend's
//     process title names its client's port, which is how capPool checks
//     that the pid it reads is the backend it talks to.
//   - Round trips: every connection of a capPool counts the times the client
//     writes after having read (one turn of the conversation each), so a
//     pipelined batch counts once and a statement prepared before it runs
//     counts twice. Only the pool's own connections count, not the wake-up
//     connection a store opens with the pool's settings.
//   - Relay CPU: getrusage of the relay's own process (capacity_relay.go).

// capProcCPU is the CPU time of a single-threaded process (a PostgreSQL
// backend), ok false when it cannot be read.
func capProcCPU(pid int) (time.Duration, bool) {
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/schedstat"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			if ns, err := strconv.ParseInt(f[0], 10, 64); err == nil && ns > 0 {
				return time.Duration(ns), true
			}
		}
	}
	return pidCPU(pid)
}

// rttCounter counts round trips on the connections of one pool.
type rttCounter struct{ turns atomic.Int64 }

// rttConn is a net.Conn that counts turns: a write after a read (or the
// first write) is a new round trip. counted is set once the connection is
// known to be the pool's (AfterConnect), so a wake-up connection dialled with
// the same settings counts nothing.
type rttConn struct {
	net.Conn
	c       *rttCounter
	counted atomic.Bool
	read    atomic.Bool
}

func (c *rttConn) Write(p []byte) (int, error) {
	if c.read.Swap(false) && c.counted.Load() {
		c.c.turns.Add(1)
	}
	return c.Conn.Write(p)
}

func (c *rttConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.read.Store(true)
	}
	return n, err
}

// capPool is a pool whose connections carry an application_name (by which
// their backends, and those of any connection opened with its settings, are
// found) and count their round trips.
type capPool struct {
	*pgxpool.Pool
	app string
	rtt *rttCounter
	mu  sync.Mutex
	// pids and ports of the pool's own backends, from AfterConnect.
	pids map[int]int
}

// newCapPool opens a pool of n connections named app on dsn, all of them
// before it returns.
func newCapPool(ctx context.Context, dsn string, n int32, app string, params ...string) (*capPool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse the connection URL: %w", err)
	}
	p := &capPool{app: app, rtt: &rttCounter{}, pids: make(map[int]int)}
	cfg.MaxConns, cfg.MinConns = n, n
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	for i := 0; i+1 < len(params); i += 2 {
		cfg.ConnConfig.RuntimeParams[params[i]] = params[i+1]
	}
	dialer := &net.Dialer{KeepAlive: 5 * time.Minute}
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &rttConn{Conn: c, c: p.rtt}, nil
	}
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		var port int
		if err := c.QueryRow(ctx, "SELECT COALESCE(inet_client_port(), 0)").Scan(&port); err != nil {
			return err
		}
		p.mu.Lock()
		p.pids[int(c.PgConn().PID())] = port
		p.mu.Unlock()
		if rc, ok := c.PgConn().Conn().(*rttConn); ok {
			rc.counted.Store(true)
		}
		return nil
	}
	if p.Pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, err
	}
	if err := warm(ctx, p.Pool, int(n)); err != nil {
		p.Close()
		return nil, fmt.Errorf("PostgreSQL at %s: %w", cfg.ConnConfig.Host, err)
	}
	return p, nil
}

// local reports whether the pool's backends are processes of this host
// whose CPU time /proc shows: the first backend's process title must name
// the port its client connects from.
func (p *capPool) local() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for pid, port := range p.pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err != nil {
			return false
		}
		if _, ok := capProcCPU(pid); !ok {
			return false
		}
		return port == 0 || strings.Contains(string(b), "("+strconv.Itoa(port)+")")
	}
	return false
}

// backendMeter measures the CPU time of the backends whose
// application_name is app, including those that connect meanwhile; kind
// tells a WAL sender from a client backend.
type backendMeter struct {
	admin *pgxpool.Pool
	app   string
	start map[int]time.Duration
	last  map[int]time.Duration
	kind  map[int]string
}

func newBackendMeter(ctx context.Context, admin *pgxpool.Pool, app string) (*backendMeter, error) {
	m := &backendMeter{admin: admin, app: app, start: map[int]time.Duration{}, last: map[int]time.Duration{}, kind: map[int]string{}}
	if err := m.sample(ctx, true); err != nil {
		return nil, err
	}
	return m, nil
}

// sample reads the backends' CPU times now; at the start they are the
// baseline, later a backend not seen before counts from zero.
func (m *backendMeter) sample(ctx context.Context, first bool) error {
	rows, err := m.admin.Query(ctx, `SELECT pid, backend_type FROM pg_stat_activity WHERE application_name = $1`, m.app)
	if err != nil {
		return fmt.Errorf("backends of %s: %w", m.app, err)
	}
	type be struct {
		Pid  int
		Kind string
	}
	bes, err := pgx.CollectRows(rows, pgx.RowToStructByPos[be])
	if err != nil {
		return fmt.Errorf("backends of %s: %w", m.app, err)
	}
	for _, b := range bes {
		t, ok := capProcCPU(b.Pid)
		if !ok {
			continue
		}
		if _, seen := m.last[b.Pid]; !seen && first {
			m.start[b.Pid] = t
		}
		m.last[b.Pid] = t
		m.kind[b.Pid] = b.Kind
	}
	return nil
}

// stop samples once more and returns the CPU time used since the start by
// all the backends and by those of kind "walsender".
func (m *backendMeter) stop(ctx context.Context) (all, walsender time.Duration) {
	_ = m.sample(ctx, false) // on error, the last samples stand
	for pid, t := range m.last {
		d := t - m.start[pid]
		all += d
		if m.kind[pid] == "walsender" {
			walsender += d
		}
	}
	return all, walsender
}

// detail lists each backend's CPU time since the start, for -v logs.
func (m *backendMeter) detail() string {
	var b strings.Builder
	for pid, t := range m.last {
		fmt.Fprintf(&b, " %d(%s)=%.1fms", pid, m.kind[pid], float64(t-m.start[pid])/1e6)
	}
	return b.String()
}

// serverCPU splits the CPU time of a local PostgreSQL server's processes
// (the postmaster's children) into its background processes (WAL writer,
// checkpointer, background writer, ...) and its client backends, so a
// phase can say what the server spent besides the backends it measured,
// and whether anyone else was using the server meanwhile.
type serverCPU struct {
	admin   *pgxpool.Pool
	start   map[int]time.Duration
	bgTypes map[int]bool
}

// serverSample is what serverCPU measured.
type serverSample struct {
	background time.Duration // background processes
	clients    time.Duration // every client backend and WAL sender, ours included
	ok         bool
}

func newServerCPU(ctx context.Context, admin *pgxpool.Pool) *serverCPU {
	s := &serverCPU{admin: admin, start: map[int]time.Duration{}, bgTypes: map[int]bool{}}
	s.read(ctx, s.start)
	return s
}

func (s *serverCPU) read(ctx context.Context, into map[int]time.Duration) bool {
	rows, err := s.admin.Query(ctx, `SELECT pid, backend_type NOT IN ('client backend', 'walsender') FROM pg_stat_activity`)
	if err != nil {
		return false
	}
	type be struct {
		Pid int
		Bg  bool
	}
	bes, err := pgx.CollectRows(rows, pgx.RowToStructByPos[be])
	if err != nil {
		return false
	}
	for _, b := range bes {
		if t, ok := capProcCPU(b.Pid); ok {
			into[b.Pid] = t
			s.bgTypes[b.Pid] = b.Bg
		}
	}
	return len(into) > 0
}

// stop is the CPU time since the start of the server's processes that
// existed at the start (a backend that came and went meanwhile is missed:
// the figure is a lower bound of the clients' share).
func (s *serverCPU) stop(ctx context.Context) serverSample {
	now := map[int]time.Duration{}
	if len(s.start) == 0 || !s.read(ctx, now) {
		return serverSample{}
	}
	var out serverSample
	for pid, t := range now {
		d := t - s.start[pid] // a new pid counts from zero
		if s.bgTypes[pid] {
			out.background += d
		} else {
			out.clients += d
		}
	}
	out.ok = true
	return out
}

// cpuStat is /proc/stat's busy and total time of the CPUs in a set, for the
// share of those CPUs the measured processes obtained.
type cpuStat struct{ busy, total int64 }

func readCPUStat(cpus []int) (cpuStat, bool) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return cpuStat{}, false
	}
	defer f.Close()
	want := map[string]bool{}
	for _, c := range cpus {
		want["cpu"+strconv.Itoa(c)] = true
	}
	var s cpuStat
	found := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 8 || !want[fs[0]] {
			continue
		}
		found++
		var v [8]int64
		for i := range v {
			v[i], _ = strconv.ParseInt(fs[i+1], 10, 64)
		}
		// user, nice, system, idle, iowait, irq, softirq, steal
		for _, x := range v {
			s.total += x
		}
		s.busy += v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
	}
	return s, found == len(cpus) && found > 0
}

// allowedCPUs is the CPU set this process may run on (taskset), from
// /proc/self/status.
func allowedCPUs() []int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || k != "Cpus_allowed_list" {
			continue
		}
		var cpus []int
		for _, part := range strings.Split(strings.TrimSpace(v), ",") {
			lo, hi, isRange := strings.Cut(part, "-")
			a, err1 := strconv.Atoi(lo)
			z := a
			var err2 error
			if isRange {
				z, err2 = strconv.Atoi(hi)
			}
			if err1 != nil || err2 != nil {
				return nil
			}
			for c := a; c <= z; c++ {
				cpus = append(cpus, c)
			}
		}
		return cpus
	}
	return nil
}

// loadSnapshot is the load average, recorded with every figure.
func loadSnapshot() string { return loadAvg() }
