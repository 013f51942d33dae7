package chaos_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// scratchPair is a scratch PostgreSQL 15 primary and its streaming
// replica, made with Debian's pg_createcluster and pg_basebackup on spare
// ports, for failover tests. The main cluster (5432) is never touched.
// Both run with wal_level = logical (so relays wake from the WAL) and
// the primary replicates synchronously to the replica, so a commit the
// primary acknowledged is on the replica too: what a failover may not
// lose is then exactly what the writers saw committed.
type scratchPair struct {
	t                    *testing.T
	name                 string // the primary's cluster name; the replica's is name+"r"
	primaryPort, replica int
}

// replicaAppName is the replica's application_name, the primary's
// synchronous_standby_names: naming it keeps the relays' logical WAL
// senders out of synchronous replication.
const replicaAppName = "failover_replica"

func newScratchPair(t *testing.T) *scratchPair {
	t.Helper()
	for _, tool := range []string{"pg_createcluster", "pg_ctlcluster", "pg_dropcluster", "pg_basebackup", "runuser"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed: failover tests need Debian's postgresql-common and PostgreSQL 15 (apt-get install postgresql-15), run as root", tool)
		}
	}
	if os.Geteuid() != 0 {
		t.Fatal("failover tests create scratch clusters with pg_createcluster: run them as root (CI does)")
	}
	p := &scratchPair{t: t, name: "okfo" + randomHex(4), primaryPort: freePort(t), replica: freePort(t)}
	t.Cleanup(func() {
		// Dropped even when the test fails; -stop stops what still runs.
		for _, n := range []string{p.name + "r", p.name} {
			if out, err := exec.Command("pg_dropcluster", "--stop", "15", n).CombinedOutput(); err != nil {
				t.Logf("pg_dropcluster %s: %v %s", n, err, out)
			}
		}
	})
	common := []string{
		"listen_addresses = '127.0.0.1'",
		"wal_level = logical",
		"max_wal_senders = 30",
		"max_replication_slots = 30",
		"max_connections = 100",
		"shared_buffers = '32MB'",
		"fsync = off", // a test cluster: the server is killed, never the machine
		"hot_standby = on",
		"wal_sender_timeout = '10s'",
		"wal_receiver_status_interval = '1s'",
	}
	p.create(p.name, p.primaryPort, append(common,
		"synchronous_standby_names = '"+replicaAppName+"'",
		"synchronous_commit = on"))
	p.ctl(p.name, "start")

	// The replica: a cluster of its own (its configuration directory and
	// port) whose data directory is a base backup of the primary.
	p.create(p.name+"r", p.replica, common)
	dir := filepath.Join("/var/lib/postgresql/15", p.name+"r")
	// Empty, not removed: the directory is the postgres user's, its
	// parent is not.
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	p.run("runuser", "-u", "postgres", "--", "pg_basebackup", "-h", "127.0.0.1", "-p", fmt.Sprint(p.primaryPort), "-U", "postgres",
		"-D", dir, "-R", "-X", "stream", "--no-sync", "-d", "application_name="+replicaAppName)
	p.ctl(p.name+"r", "start")

	// Wait until the primary streams to the replica synchronously: from
	// then on a commit returns only once the replica has it.
	ctx := context.Background()
	conn := p.connect(ctx, p.primaryPort)
	defer conn.Close(ctx)
	err = waitUntil(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming' AND sync_state = 'sync'`, replicaAppName).Scan(&n)
		return n == 1, err
	})
	if err != nil {
		t.Fatalf("the replica never streamed synchronously: %v", err)
	}
	return p
}

func (p *scratchPair) create(name string, port int, conf []string) {
	p.t.Helper()
	p.run("pg_createcluster", "15", name, "--port", fmt.Sprint(port), "--", "-A", "trust", "--no-sync")
	f := filepath.Join("/etc/postgresql/15", name, "conf.d", "outboxkit-failover.conf")
	if err := os.WriteFile(f, []byte(strings.Join(conf, "\n")+"\n"), 0o644); err != nil {
		p.t.Fatal(err)
	}
}

func (p *scratchPair) ctl(name string, args ...string) {
	p.t.Helper()
	p.run("pg_ctlcluster", append([]string{"--skip-systemctl-redirect", "15", name}, args...)...)
}

func (p *scratchPair) run(name string, args ...string) {
	p.t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		p.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// url is a keyword/value connection string to one server.
func (p *scratchPair) url(port int) string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=disable", port)
}

// multiHostURL names both servers and asks for the one that accepts
// writes, as a failover-aware client should.
func (p *scratchPair) multiHostURL() string {
	return fmt.Sprintf("host=127.0.0.1,127.0.0.1 port=%d,%d user=postgres dbname=postgres sslmode=disable target_session_attrs=read-write connect_timeout=2",
		p.primaryPort, p.replica)
}

func (p *scratchPair) connect(ctx context.Context, port int) *pgx.Conn {
	p.t.Helper()
	conn, err := pgx.Connect(ctx, p.url(port))
	if err != nil {
		p.t.Fatal(err)
	}
	return conn
}

// promote promotes the replica (pg_ctl promote waits until it accepts
// writes).
func (p *scratchPair) promote() { p.ctl(p.name+"r", "promote") }

// stopPrimary stops the old primary in immediate mode: as a crash would,
// with no shutdown checkpoint and every connection cut.
func (p *scratchPair) stopPrimary() { p.ctl(p.name, "stop", "-m", "immediate") }

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
