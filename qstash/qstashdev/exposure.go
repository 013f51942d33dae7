package qstashdev

import (
	"errors"
	"fmt"
	"net"
)

// ErrPublicToken is returned by Serve and ListenAndServe for an address
// other than loopback while the token is DefaultToken. That token is
// published in Upstash's documentation, so on a reachable address anyone
// could publish through the server, read message bodies and the DLQ, and
// rotate its keys.
var ErrPublicToken = errors.New("qstashdev: the default token is public")

// CheckListenAddr reports whether the server may listen on addr: any
// address with a token of one's own, but only loopback (or a non-IP
// address such as a unix socket) with DefaultToken. Serve calls it; a
// program that prints the credentials before serving, as outboxctl
// qstash-dev does, calls it first.
func (s *Server) CheckListenAddr(addr net.Addr) error {
	if s.cfg.Token != DefaultToken || !exposed(addr) {
		return nil
	}
	return fmt.Errorf("%w: refusing to serve on %s, which is not a loopback address, where anyone who can reach it could publish and read messages: set Config.Token to a secret of your own, or listen on 127.0.0.1", ErrPublicToken, addr)
}

// exposed reports an IP address other than loopback. Addresses that are
// not IP (unix sockets, in-memory listeners) are not reachable from the
// network.
func exposed(addr net.Addr) bool {
	var ip net.IP
	switch a := addr.(type) {
	case *net.TCPAddr:
		ip = a.IP
	case *net.UDPAddr:
		ip = a.IP
	case *net.IPAddr:
		ip = a.IP
	default:
		host, _, err := net.SplitHostPort(addr.String())
		if err != nil {
			return false
		}
		if ip = net.ParseIP(host); ip == nil {
			return false
		}
	}
	return !ip.IsLoopback()
}
