package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Telling whether a connection goes through a pooler.
//
// A client does not learn from the protocol that PgBouncer (or another
// proxy) stands between it and PostgreSQL: PgBouncer answers the startup
// with the server's own parameters. What gives it away is the address: the
// server knows where its end of the connection is (inet_server_addr,
// inet_server_port, and its port setting), the client knows where it
// connected to (the socket's remote address), and through a proxy the two
// are different connections with different ends.
//
// The heuristic errs towards "proxied". Its false positives are every
// address translation between client and server that is not a pooler: a
// Kubernetes Service (the client connects to the service's virtual IP,
// the server sees the pod's address), Docker's published ports (the
// client connects to 127.0.0.1:15432, the server listens on
// 172.17.0.2:5432), a TCP load balancer or a cloud SQL proxy. Those pass
// LISTEN, named prepared statements and replication connections just as
// a direct connection does, so what it decides must be cheap to get
// wrong: NewPool then runs statements unnamed (planned each time, still
// one round trip), and the wake-ups confirm with a LISTEN probe before
// giving up LISTEN (wakeup_pooler.go). Its false negatives: a pooler on
// the server's own host and port (impossible for two listeners), and a
// pooler reached by a Unix socket named after the server's port.

// proxyVerdict is what detectProxy found.
type proxyVerdict struct {
	// Proxied: the connection's ends do not match.
	Proxied bool
	// Why says what differed, or what matched, for the log.
	Why string
}

// detectProxy tells, on one connection, whether it reaches PostgreSQL
// through a proxy or pooler, by comparing the socket's remote address
// with the server's view of its own end. It runs one query on the
// simple protocol, which PgBouncer in every pool mode passes unchanged.
func detectProxy(ctx context.Context, conn *pgconn.PgConn) (proxyVerdict, error) {
	res, err := conn.Exec(ctx, "SELECT host(inet_server_addr()), inet_server_port()::text, current_setting('port')").ReadAll()
	if err != nil {
		return proxyVerdict{}, fmt.Errorf("ask the server for its address: %w", err)
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 3 {
		return proxyVerdict{}, errors.New("ask the server for its address: unexpected result")
	}
	row := res[0].Rows[0]
	// NULL (a Unix socket on the server's side) arrives as nil.
	var server serverEnd
	if row[0] != nil {
		a, err := netip.ParseAddr(string(row[0]))
		if err != nil {
			return proxyVerdict{}, fmt.Errorf("ask the server for its address: %q is not an address", row[0])
		}
		server.addr = a.Unmap()
	}
	if row[1] != nil {
		server.port, _ = strconv.Atoi(string(row[1]))
	}
	server.setting, _ = strconv.Atoi(string(row[2]))
	return compareEnds(conn.Conn().RemoteAddr(), server), nil
}

// serverEnd is the server's view of its end of a connection: addr and
// port are zero for a Unix socket; setting is its port setting, the port
// it listens on (and names its Unix socket after).
type serverEnd struct {
	addr    netip.Addr
	port    int
	setting int
}

// compareEnds is the heuristic itself, apart from I/O so that every case
// has a test: the client's remote address against the server's end.
func compareEnds(remote net.Addr, server serverEnd) proxyVerdict {
	switch r := remote.(type) {
	case *net.TCPAddr:
		ap := r.AddrPort()
		client := netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		switch {
		case !server.addr.IsValid():
			return proxyVerdict{true, "connected by TCP to " + client.String() + ", but the server sees a Unix socket"}
		case server.port != int(client.Port()) || server.addr != client.Addr():
			return proxyVerdict{true, "connected to " + client.String() + ", but the server's end is " + netip.AddrPortFrom(server.addr, uint16(server.port)).String()}
		}
		return proxyVerdict{false, "connected to " + client.String() + ", the server's own address"}
	case *net.UnixAddr:
		// libpq's naming, which pgx follows: <dir>/.s.PGSQL.<port>.
		_, suffix, ok := strings.Cut(r.Name, ".s.PGSQL.")
		port, err := strconv.Atoi(suffix)
		switch {
		case server.addr.IsValid():
			return proxyVerdict{true, "connected by Unix socket " + r.Name + ", but the server sees TCP from " + server.addr.String()}
		case ok && err == nil && port != server.setting:
			return proxyVerdict{true, "connected by Unix socket " + r.Name + ", but the server listens on port " + strconv.Itoa(server.setting)}
		}
		return proxyVerdict{false, "connected by Unix socket " + r.Name + ", the server's own"}
	}
	return proxyVerdict{false, fmt.Sprintf("cannot tell from a %T remote address", remote)}
}
