package postgres

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkit/outboxkit/internal/pgtest"
)

// Every case of the address heuristic, without a server.
func TestCompareEnds(t *testing.T) {
	t.Parallel()
	tcp := func(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }
	ip := netip.MustParseAddr
	for _, tc := range []struct {
		name    string
		remote  net.Addr
		server  serverEnd
		proxied bool
	}{
		{"direct TCP", tcp("127.0.0.1:5432"), serverEnd{ip("127.0.0.1"), 5432, 5432}, false},
		{"direct IPv6", tcp("[::1]:5432"), serverEnd{ip("::1"), 5432, 5432}, false},
		{"IPv4-mapped client address", tcp("[::ffff:10.0.0.5]:5432"), serverEnd{ip("10.0.0.5"), 5432, 5432}, false},
		{"pooler on another port", tcp("127.0.0.1:6432"), serverEnd{ip("127.0.0.1"), 5432, 5432}, true},
		{"pooler on another host, same port", tcp("10.0.0.7:5432"), serverEnd{ip("10.0.0.5"), 5432, 5432}, true},
		// The documented false positive: a Service's virtual IP.
		{"kubernetes service", tcp("10.96.0.10:5432"), serverEnd{ip("10.244.1.3"), 5432, 5432}, true},
		{"TCP to a pooler that reaches the server by Unix socket", tcp("127.0.0.1:6432"), serverEnd{setting: 5432}, true},
		{"direct Unix socket", &net.UnixAddr{Name: "/var/run/postgresql/.s.PGSQL.5432", Net: "unix"}, serverEnd{setting: 5432}, false},
		{"Unix socket of a pooler", &net.UnixAddr{Name: "/var/run/postgresql/.s.PGSQL.6432", Net: "unix"}, serverEnd{setting: 5432}, true},
		{"Unix socket of a pooler that connects by TCP", &net.UnixAddr{Name: "/tmp/.s.PGSQL.5432", Net: "unix"}, serverEnd{ip("127.0.0.1"), 5432, 5432}, true},
		{"Unix socket named otherwise", &net.UnixAddr{Name: "/tmp/pg.sock", Net: "unix"}, serverEnd{setting: 5432}, false},
	} {
		if got := compareEnds(tc.remote, tc.server); got.Proxied != tc.proxied || got.Why == "" {
			t.Errorf("%s: %+v, want proxied = %v with a reason", tc.name, got, tc.proxied)
		}
	}
}

func TestSetsExecMode(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		"postgres://u@h:6432/db":                                        false,
		"postgres://u@h:6432/db?sslmode=disable":                        false,
		"postgres://u@h:6432/db?default_query_exec_mode=exec":           true,
		"postgresql://u@h/db?sslmode=disable&default_query_exec_mode=x": true,
		"host=h port=6432 dbname=db":                                    false,
		"host=h default_query_exec_mode=exec":                           true,
		"default_query_exec_mode = simple_protocol host=h":              true,
		"host=h application_name=my_default_query_exec_mode":            false,
	} {
		if got := setsExecMode(s); got != want {
			t.Errorf("setsExecMode(%q) = %v, want %v", s, got, want)
		}
	}
}

// detectProxy on real connections: the server directly, then through
// the PgBouncer CI runs.
func TestDetectProxy(t *testing.T) {
	t.Parallel()
	pgtest.RequireBouncer(t)
	for _, tc := range []struct {
		name, url string
		proxied   bool
	}{
		{"direct", pgtest.URL(), false},
		{"PgBouncer", pgtest.BouncerURL(), true},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cfg, err := pgconn.ParseConfig(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		v, err := probeProxy(ctx, cfg)
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if v.Proxied != tc.proxied {
			t.Errorf("%s: %+v, want proxied = %v", tc.name, v, tc.proxied)
		}
	}
}
