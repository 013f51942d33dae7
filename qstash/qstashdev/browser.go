package qstashdev

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// A developer's browser can reach a qstashdev on 127.0.0.1, and the
// default token is public, so every web page they visit could drive it: a
// "simple" cross-origin POST (text/plain, token in the query) needs no
// CORS preflight, and the browser sends it whatever the answer's headers
// say. Two checks close that, before authentication:
//
//   - Origin: browsers send it on every request a page makes that is not
//     a same-origin GET or HEAD (and on those, the page cannot read a
//     cross-origin answer). A request whose Origin is neither the server's
//     own nor on Config.AllowedOrigins is refused with 403. SDKs, curl and
//     relays send no Origin and are unaffected.
//   - Host, with the public token only: a DNS-rebinding page (evil.example
//     re-resolved to 127.0.0.1) is same-origin as far as the browser can
//     tell, but its requests name evil.example in Host. Only loopback
//     names are answered then. A server with a token of its own may be
//     reached under any name: a page cannot know that token.

// corsAllowMethods are the API's methods, announced to allowed origins.
const corsAllowMethods = "GET, POST, PUT, PATCH, DELETE"

// checkBrowser applies both checks. It returns true when it has answered
// r: a refusal, or the preflight of an allowed origin.
func (s *Server) checkBrowser(w http.ResponseWriter, r *http.Request) bool {
	if origin := r.Header.Get("Origin"); origin != "" && !s.sameOrigin(origin, r) {
		if !s.allowedOrigin(origin) {
			writeError(w, http.StatusForbidden, fmt.Sprintf("cross-origin request from %q refused: qstashdev answers browser pages of its own origin only; add the origin to Config.AllowedOrigins to let its pages call the API", origin))
			return true
		}
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", origin)
		h.Add("Vary", "Origin")
		h.Set("Access-Control-Expose-Headers", "Retry-After, RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset, Burst-RateLimit-Limit, Burst-RateLimit-Remaining, Burst-RateLimit-Reset")
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Set("Access-Control-Allow-Methods", corsAllowMethods)
			if rh := r.Header.Get("Access-Control-Request-Headers"); rh != "" {
				h.Set("Access-Control-Allow-Headers", rh) // every Upstash-* header is the API's
			}
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return true
		}
	}
	if s.cfg.Token == DefaultToken && overNetwork(r) && !loopbackHost(r.Host) {
		writeError(w, http.StatusForbidden, fmt.Sprintf("request for host %q refused: with the public default token qstashdev answers only requests addressed to localhost or a loopback IP, so a web page cannot reach it by rebinding a DNS name; set Config.Token (outboxctl qstash-dev --token) to serve other names", r.Host))
		return true
	}
	return false
}

// sameOrigin reports whether origin names the host and port r was sent
// to. The scheme is not compared: a TLS-terminating proxy in front would
// make a page's https origin differ from the plain request it forwards,
// and no foreign page can serve from this host and port anyway.
func (s *Server) sameOrigin(origin string, r *http.Request) bool {
	o, ok := parseOrigin(origin)
	if !ok {
		return false // "null" and other opaque origins are foreign
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	host, port := splitHostPortDefault(r.Host, scheme)
	return o.host == host && o.port == port
}

func (s *Server) allowedOrigin(origin string) bool {
	o, ok := parseOrigin(origin)
	if !ok {
		return false
	}
	for _, a := range s.allowed {
		if a == o {
			return true
		}
	}
	return false
}

// originKey is an origin normalised for comparison: lower-case scheme and
// host, explicit port.
type originKey struct{ scheme, host, port string }

// parseOrigin reads a serialized origin, scheme://host[:port] with no path.
func parseOrigin(s string) (originKey, bool) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" || u.Host == "" || u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" {
		return originKey{}, false
	}
	scheme := strings.ToLower(u.Scheme)
	host, port := splitHostPortDefault(u.Host, scheme)
	return originKey{scheme: scheme, host: host, port: port}, true
}

// splitHostPortDefault splits host[:port], lower-casing the host and
// filling in the scheme's default port.
func splitHostPortDefault(hostport, scheme string) (host, port string) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = strings.Trim(hostport, "[]"), ""
	}
	if port == "" {
		port = "80"
		if scheme == "https" {
			port = "443"
		}
	}
	return strings.ToLower(host), port
}

// overNetwork reports whether r arrived on an IP connection. A browser
// cannot reach a unix socket, and a handler called in-process
// (httptest.NewRequest, whose Host is example.com) is not a browser.
func overNetwork(r *http.Request) bool {
	addr, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return false
	}
	switch addr.(type) {
	case *net.TCPAddr, *net.IPAddr:
		return true
	}
	return false
}

// loopbackHost reports a Host naming this machine only: a loopback IP,
// localhost or a name under .localhost, which browsers resolve to
// loopback themselves (RFC 6761), so no DNS answer can rebind them.
func loopbackHost(hostport string) bool {
	if hostport == "" {
		return true // HTTP/1.0 without Host: not a browser
	}
	host, _ := splitHostPortDefault(hostport, "http")
	host = strings.TrimSuffix(host, ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// parseAllowedOrigins checks Config.AllowedOrigins.
func parseAllowedOrigins(list []string) ([]originKey, error) {
	out := make([]originKey, 0, len(list))
	var errs []error
	for _, s := range list {
		o, ok := parseOrigin(s)
		if !ok || (o.scheme != "http" && o.scheme != "https") {
			errs = append(errs, fmt.Errorf("AllowedOrigins entry %q is not an origin: write scheme://host[:port] with no path, such as http://localhost:3000 (there is no wildcard: list each origin)", s))
			continue
		}
		out = append(out, o)
	}
	return out, errors.Join(errs...)
}
