package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// CPU time per event is the figure that survives a busy machine: wall-clock
// throughput on 2 shared cores moves with whatever else runs, while the CPU
// one system spends per event barely does. The harness measures it on both
// sides: the Go process (getrusage) and the PostgreSQL backends serving the
// system's own connections (/proc/<pid>/stat, when the server runs on this
// machine and /proc is readable).

// cpuMeter measures the CPU time of this process and of a set of
// PostgreSQL backends between start and stop.
type cpuMeter struct {
	pids       []int
	proc0, db0 time.Duration
	// With app set, the backends are those whose application_name is app
	// at stop, found through admin; start holds their CPU time at the
	// start (0 for backends that connected since).
	app   string
	admin *pgxpool.Pool
	start map[int]time.Duration
	// last holds each backend's CPU time at the latest sample, so that
	// one that disconnects before stop is counted up to then.
	last map[int]time.Duration
}

// backendPIDs returns the server process IDs of every connection of pool
// (all of which newPool opened).
func backendPIDs(ctx context.Context, pool *pgxpool.Pool) ([]int, error) {
	n := int(pool.Config().MaxConns)
	conns := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	pids := make([]int, 0, n)
	for i := 0; i < n; i++ {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		conns = append(conns, c)
		var pid int
		if err := c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			return nil, fmt.Errorf("backend pid: %w", err)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// newCPUMeter starts measuring this process and the backends of pools.
func newCPUMeter(ctx context.Context, pools ...*pgxpool.Pool) (*cpuMeter, error) {
	m := &cpuMeter{}
	for _, p := range pools {
		pids, err := backendPIDs(ctx, p)
		if err != nil {
			return nil, err
		}
		m.pids = append(m.pids, pids...)
	}
	m.proc0, m.db0 = cpuTime(), pidsCPU(m.pids)
	return m, nil
}

// newAppCPUMeter starts measuring this process and the backends whose
// application_name is app, including those that connect while it runs.
// River needs it: its listener takes a connection out of the pool
// (Hijack) and the pool opens another, which a meter of the pool's
// connections at the start would miss. A backend that disconnects before
// stop is missed, which none of River's does during a trial.
func newAppCPUMeter(ctx context.Context, admin *pgxpool.Pool, app string) (*cpuMeter, error) {
	pids, err := appPIDs(ctx, admin, app)
	if err != nil {
		return nil, err
	}
	m := &cpuMeter{app: app, admin: admin, start: make(map[int]time.Duration, len(pids)), last: make(map[int]time.Duration, len(pids))}
	for _, pid := range pids {
		m.start[pid] = pidsCPU([]int{pid})
		m.last[pid] = m.start[pid]
	}
	m.proc0 = cpuTime()
	return m, nil
}

func appPIDs(ctx context.Context, admin *pgxpool.Pool, app string) ([]int, error) {
	rows, err := admin.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, app)
	if err != nil {
		return nil, fmt.Errorf("backends of %s: %w", app, err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[int])
}

// sample records the CPU time of the app's backends now (a meter made by
// newAppCPUMeter only). A long measurement samples now and then, so that a
// backend that disconnects before stop (a wake-up connection that
// reconnects) is counted up to its last sample instead of missed.
func (m *cpuMeter) sample(ctx context.Context) error {
	pids, err := appPIDs(ctx, m.admin, m.app)
	if err != nil {
		return err
	}
	for _, pid := range pids {
		if t, ok := pidCPU(pid); ok {
			m.last[pid] = t
		}
	}
	return nil
}

// backends is how many backends of the app the meter has seen (a meter
// made by newAppCPUMeter only).
func (m *cpuMeter) backends() int { return len(m.last) }

// stop returns the CPU time used since start by this process and by the
// backends (0 when /proc does not show them).
func (m *cpuMeter) stop() (proc, db time.Duration) {
	proc = cpuTime() - m.proc0
	if m.app == "" {
		return proc, pidsCPU(m.pids) - m.db0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = m.sample(ctx) // on error, the last samples stand
	for pid, t := range m.last {
		db += t - m.start[pid]
	}
	return proc, db
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat times: 100 on every
// Linux architecture Go supports.
const clockTick = 100

// pidsCPU sums user and system time of processes from /proc/<pid>/stat,
// counting those it cannot read as 0.
func pidsCPU(pids []int) time.Duration {
	var sum time.Duration
	for _, pid := range pids {
		t, _ := pidCPU(pid)
		sum += t
	}
	return sum
}

// pidCPU is the user and system time of one process from
// /proc/<pid>/stat; ok is false when it cannot be read (the process
// exited, or the server runs elsewhere).
func pidCPU(pid int) (t time.Duration, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name (field 2) may hold spaces; fields after its
	// closing parenthesis are plain. utime and stime are fields 14 and
	// 15, so 12 and 13 after the parenthesis.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(u+st) * time.Second / clockTick, true
}

// perEvent is a CPU time per event in microseconds.
func perEvent(d time.Duration, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(d.Microseconds()) / float64(n)
}

// cpuTime is the user plus system CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
