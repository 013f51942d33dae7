package dashboard

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// sessionCookie holds a browser's proof that it typed the bearer token.
const sessionCookie = "outboxkit_dashboard_session"

// sessionLifetime is how long a login lasts.
const sessionLifetime = 12 * time.Hour

// authenticator decides who a request is.
type authenticator struct {
	a        Auth
	basePath string
	// sessionKey signs session cookies. It is derived from the token, so
	// sessions survive a restart and end when the token changes.
	sessionKey []byte
}

func newAuthenticator(a Auth, basePath string) *authenticator {
	au := &authenticator{a: a, basePath: basePath}
	if a.Token != "" {
		k := sha256.Sum256([]byte("outboxkit dashboard session\x00" + a.Token))
		au.sessionKey = k[:]
	}
	return au
}

type whoKey struct{}

func withWho(ctx context.Context, who string) context.Context {
	return context.WithValue(ctx, whoKey{}, who)
}

// whoFrom is who made the request, as the audit log names them.
func whoFrom(ctx context.Context) string {
	s, _ := ctx.Value(whoKey{}).(string)
	return s
}

// check answers the request itself (401, 403, a redirect to /login) and
// returns false unless it may go on; who names the user for the audit log.
func (au *authenticator) check(w http.ResponseWriter, r *http.Request) (who string, ok bool) {
	ip, _ := remoteIP(r.RemoteAddr)
	if !au.a.Enabled() {
		// No authentication: loopback clients only, and only under a
		// loopback Host, so a web page whose name was rebound to
		// 127.0.0.1 cannot read or drive the dashboard.
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if !ip.IsLoopback() || !isLoopbackHost(host) {
			http.Error(w, "This dashboard has no authentication configured, so it answers only requests from this machine addressed to 127.0.0.1 or localhost.", http.StatusForbidden)
			return "", false
		}
		return "local user", true
	}
	path := r.URL.Path
	if path == "/login" || strings.HasPrefix(path, "/static/") {
		return "", true
	}
	if au.a.ProxyHeader != "" {
		if v := r.Header.Get(au.a.ProxyHeader); v != "" && au.trustedProxy(ip) {
			return "proxy user " + cleanName(v), true
		}
	}
	if au.a.Token != "" {
		if tok, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); found && equal(tok, au.a.Token) {
			return "bearer token", true
		}
		if c, err := r.Cookie(sessionCookie); err == nil && au.validSession(c.Value, time.Now()) {
			return "token session", true
		}
	}
	if au.a.BasicUser != "" {
		if u, p, found := r.BasicAuth(); found && equal(u, au.a.BasicUser) && equal(p, au.a.BasicPassword) {
			return "basic user " + cleanName(u), true
		}
	}
	switch {
	case au.a.Token != "" && r.Method == http.MethodGet && !strings.HasPrefix(path, "/api/"):
		next := r.URL.RequestURI()
		http.Redirect(w, r, au.basePath+"/login?next="+url.QueryEscape(next), http.StatusSeeOther)
	case au.a.BasicUser != "":
		w.Header().Set("WWW-Authenticate", `Basic realm="outboxkit dashboard", charset="UTF-8"`)
		http.Error(w, "Authentication required.", http.StatusUnauthorized)
	default:
		http.Error(w, "Authentication required.", http.StatusUnauthorized)
	}
	return "", false
}

func (au *authenticator) trustedProxy(ip netip.Addr) bool {
	if !ip.IsValid() {
		return false
	}
	for _, p := range au.a.TrustedProxies {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

func equal(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// cleanName keeps a user name printable and short for the audit log.
func cleanName(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return -1
	}, s)
	if len(s) > 64 {
		s = s[:64]
	}
	return strconv.Quote(s)
}

// newSession returns a session cookie's value: its expiry and an HMAC
// over it.
func (au *authenticator) newSession(now time.Time) string {
	exp := strconv.FormatInt(now.Add(sessionLifetime).Unix(), 10)
	return exp + "." + au.sign(exp)
}

func (au *authenticator) sign(s string) string {
	m := hmac.New(sha256.New, au.sessionKey)
	m.Write([]byte(s))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (au *authenticator) validSession(v string, now time.Time) bool {
	if au.sessionKey == nil {
		return false
	}
	exp, sig, ok := strings.Cut(v, ".")
	if !ok || !hmac.Equal([]byte(sig), []byte(au.sign(exp))) {
		return false
	}
	t, err := strconv.ParseInt(exp, 10, 64)
	return err == nil && now.Unix() < t
}

// cookiePath is where the dashboard's cookies apply.
func cookiePath(basePath string) string {
	if basePath == "" {
		return "/"
	}
	return basePath + "/"
}
