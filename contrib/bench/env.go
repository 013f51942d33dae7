package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Env describes the machine and database a run measured.
type Env struct {
	NumCPU     int      `json:"num_cpu"`
	GOMAXPROCS int      `json:"gomaxprocs"`
	CPUModel   string   `json:"cpu_model"`
	Memory     string   `json:"memory"`
	GoVersion  string   `json:"go_version"`
	LoadBefore string   `json:"load_before"`
	LoadAfter  string   `json:"load_after"`
	PGVersion  string   `json:"pg_version"`
	PGSettings []string `json:"pg_settings_not_default"`
}

func collectEnv(ctx context.Context, pool *pgxpool.Pool) (Env, error) {
	e := Env{
		NumCPU:     runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		CPUModel:   cpuModel(),
		Memory:     memTotal(),
		GoVersion:  runtime.Version(),
		LoadBefore: loadAvg(),
	}
	if err := pool.QueryRow(ctx, "SELECT version()").Scan(&e.PGVersion); err != nil {
		return e, fmt.Errorf("read PostgreSQL version: %w", err)
	}
	// Settings whose value comes from anywhere but the built-in default,
	// except those every client session sets for itself or that only name
	// files.
	rows, err := pool.Query(ctx, `SELECT name, setting, COALESCE(unit, '') FROM pg_settings
WHERE source NOT IN ('default', 'client', 'session', 'override')
	AND name NOT LIKE 'lc\_%' AND name NOT LIKE '%\_file' AND name NOT IN ('unix_socket_directories', 'log_line_prefix',
		'cluster_name', 'default_text_search_config', 'log_timezone', 'DateStyle', 'TimeZone', 'dynamic_shared_memory_type')
ORDER BY name`)
	if err != nil {
		return e, fmt.Errorf("read pg_settings: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name, setting, unit string
		if err := rows.Scan(&name, &setting, &unit); err != nil {
			return e, err
		}
		e.PGSettings = append(e.PGSettings, name+"="+withUnit(setting, unit))
	}
	return e, rows.Err()
}

// withUnit turns pg_settings' (setting, unit) into a readable value:
// shared_buffers 16384 × 8kB → 128MB.
func withUnit(setting, unit string) string {
	n, err := strconv.ParseInt(setting, 10, 64)
	if err != nil || unit == "" {
		return setting + unit
	}
	switch unit {
	case "8kB":
		return humanBytes(n * 8192)
	case "kB":
		return humanBytes(n * 1024)
	case "MB":
		return humanBytes(n << 20)
	}
	return setting + unit
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + "GB"
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + "MB"
	case n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + "kB"
	}
	return strconv.FormatInt(n, 10) + "B"
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func memTotal() string {
	kb := procField("/proc/meminfo", "MemTotal")
	if kb == 0 {
		return "unknown"
	}
	return fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// procField reads a "Name:   123 kB" line of a /proc status-like file and
// returns the number (0 when absent).
func procField(path, name string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != name {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) == 0 {
			return 0
		}
		n, _ := strconv.ParseInt(fields[0], 10, 64)
		return n
	}
	return 0
}
