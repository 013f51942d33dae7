package dashboard

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// CheckListen returns an error when addr (host:port, as net.Listen takes
// it) is not a loopback address and auth sets no authentication: a
// dashboard that can replay and purge events must not be open to the
// network. ":8089" and "0.0.0.0:8089" listen on every interface, so they
// need authentication too.
func CheckListen(addr string, auth Auth) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("outboxkit/dashboard: listen address %q: %w (use host:port, e.g. 127.0.0.1:8089)", addr, err)
	}
	if auth.Enabled() || isLoopbackHost(host) {
		return nil
	}
	return fmt.Errorf("outboxkit/dashboard: refusing to listen on %s without authentication (%w): listen on 127.0.0.1, or configure authentication (an access token, basic-auth credentials or a trusted proxy header)", addr, errNotLoopback)
}

// isLoopbackHost reports whether host (an IP or a name, without port) is
// a loopback address or "localhost".
func isLoopbackHost(host string) bool {
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// remoteIP is the address a request came from.
func remoteIP(remoteAddr string) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		ip, err := netip.ParseAddr(remoteAddr)
		return ip.Unmap(), err == nil
	}
	return ap.Addr().Unmap(), true
}
