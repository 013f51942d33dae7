package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/internal/pgtest"
)

// scratchCluster is a PostgreSQL cluster of its own, made for one test
// with Debian's pg_createcluster and dropped when the test ends. Checks
// that look at the whole server (sessions, replication slots, autovacuum
// settings) cannot be asserted exactly on the shared test server, where
// other packages' tests open transactions and slots of their own.
type scratchCluster struct {
	version, name string
	url           string
}

// newScratchCluster creates, starts and returns a cluster with trust
// authentication on a free loopback port and the given settings
// ("autovacuum_naptime=1s"). It fails, never skips, when the cluster
// cannot be made: the checks it serves must run in CI.
func newScratchCluster(t *testing.T, settings ...string) *scratchCluster {
	t.Helper()
	for _, tool := range []string{"pg_createcluster", "pg_ctlcluster", "pg_dropcluster"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("scratch cluster: %s is not on PATH (%v): install postgresql-common (Debian's cluster tools), which CI's machine has", tool, err)
		}
	}
	// The same major version as the test server.
	var num int
	if err := pgtest.Pool(t, 1).QueryRow(ctxT(t), "SELECT current_setting('server_version_num')::int").Scan(&num); err != nil {
		t.Fatal(err)
	}
	version := strconv.Itoa(num / 10000)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	c := &scratchCluster{version: version, name: "okdoctor_" + hex.EncodeToString(b)}

	args := []string{version, c.name, "--port", strconv.Itoa(port)}
	for _, s := range settings {
		args = append(args, "-o", s)
	}
	args = append(args, "--", "-A", "trust")
	run := func(name string, args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("scratch cluster: %s %s: %v\n%s(pg_createcluster needs root or the postgres user)", name, strings.Join(args, " "), err, out)
		}
	}
	run("pg_createcluster", args...)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "pg_dropcluster", "--stop", c.version, c.name).CombinedOutput(); err != nil {
			t.Errorf("scratch cluster: pg_dropcluster --stop %s %s: %v\n%s", c.version, c.name, err, out)
		}
	})
	run("pg_ctlcluster", "--skip-systemctl-redirect", version, c.name, "start")
	c.url = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	return c
}

// pool returns a pool on the cluster, closed when t ends.
func (c *scratchCluster) pool(t *testing.T, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(c.url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
