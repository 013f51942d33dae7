package dashboard

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestCheckListen(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr string
		auth Auth
		ok   bool
	}{
		{"127.0.0.1:8089", Auth{}, true},
		{"localhost:8089", Auth{}, true},
		{"[::1]:8089", Auth{}, true},
		{"127.1.2.3:0", Auth{}, true},
		{"0.0.0.0:8089", Auth{}, false},
		{":8089", Auth{}, false},
		{"[::]:8089", Auth{}, false},
		{"10.0.0.5:8089", Auth{}, false},
		{"dashboard.internal:8089", Auth{}, false},
		{"0.0.0.0:8089", Auth{Token: "t"}, true},
		{"0.0.0.0:8089", Auth{BasicUser: "u", BasicPassword: "p"}, true},
		{"0.0.0.0:8089", Auth{ProxyHeader: "X-Forwarded-User"}, true},
	} {
		err := CheckListen(tc.addr, tc.auth)
		if (err == nil) != tc.ok {
			t.Errorf("CheckListen(%q, %+v) = %v", tc.addr, tc.auth, err)
		}
		if err != nil && !errors.Is(err, errNotLoopback) {
			t.Errorf("CheckListen(%q): %v does not match errNotLoopback", tc.addr, err)
		}
	}
	if err := CheckListen("no-port", Auth{}); err == nil {
		t.Error("CheckListen accepted an address without a port")
	}
}

func TestNormaliseError(t *testing.T) {
	t.Parallel()
	same := []string{
		"publish: POST https://x.example/hook: 503 Service Unavailable (request 8123)",
		"publish: POST https://x.example/hook: 503 Service Unavailable (request 77)",
		"publish: POST https://x.example/hook: 502 Service Unavailable (request 1)",
	}
	for _, s := range same[1:] {
		if normaliseError(s) != normaliseError(same[0]) {
			t.Errorf("%q and %q normalise apart: %q vs %q", s, same[0], normaliseError(s), normaliseError(same[0]))
		}
	}
	for _, pair := range [][2]string{
		{"event 0190f1a2-7b3c-7d4e-8f90-a1b2c3d4e5f6 failed after 1.5s", "event 01a23265-2031-7527-bfbd-dd5f4b2edf03 failed after 30s"},
		{`dial tcp 10.0.0.1:443: connection refused`, `dial tcp 10.9.8.7:8443: connection refused`},
		{`no route for "order.placed"`, `no route for "invoice.sent"`},
		{"trace 4bf92f3577b34da6a3ce929d0e0e4736 lost", "trace 00f067aa0ba902b7aa0ba902b7aa0ba9 lost"},
	} {
		if a, b := normaliseError(pair[0]), normaliseError(pair[1]); a != b {
			t.Errorf("%q and %q normalise apart: %q vs %q", pair[0], pair[1], a, b)
		}
	}
	if normaliseError("publish: 503") == normaliseError("decode: bad payload") {
		t.Error("different failures normalise together")
	}
	if got := normaliseError("POST https://u:hunter2@x.example/?token=abc&x=1: Bearer abcdefghijkl failed"); strings.Contains(got, "hunter2") || strings.Contains(got, "abc&") || strings.Contains(got, "abcdefghijkl") {
		t.Errorf("normalised error keeps a secret: %q", got)
	}
}

func TestRedactText(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"https://user:pw@host/x":               "https://[redacted]@host/x",
		"amqp://guest:guest@127.0.0.1:5672/":   "amqp://[redacted]@127.0.0.1:5672/",
		"https://h/x?token=abc&keep=1":         "https://h/x?token=[redacted]&keep=1",
		"Authorization: Bearer abc.def.ghi123": "Authorization: Bearer [redacted]",
		"plain text":                           "plain text",
	} {
		if got := redactText(in); got != want {
			t.Errorf("redactText(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no targets", Config{}, "Targets is empty"},
		{"nil pool", Config{Targets: []Target{{}}}, "Pool is nil"},
		{"half basic", Config{Targets: []Target{{Pool: db.pool}}, Auth: Auth{BasicUser: "u"}}, "set both or neither"},
		{"bad trace", Config{Targets: []Target{{Pool: db.pool}}, TraceURL: "javascript:alert(1)//{trace_id}"}, "not an http(s) URL"},
		{"trace without id", Config{Targets: []Target{{Pool: db.pool}}, TraceURL: "http://jaeger/"}, "lacks {trace_id}"},
		{"bad regexp", Config{Targets: []Target{{Pool: db.pool}}, RedactHeaders: "("}, "not a regular expression"},
		{"bad schema", Config{Targets: []Target{{Pool: db.pool, Schema: "a;drop"}}}, "Targets[0]"},
		{"twice", Config{Targets: []Target{{Pool: db.pool}, {Pool: db.pool}}}, "repeats"},
		{"bad relay url", Config{Targets: []Target{{Pool: db.pool}}, RelayHealthURLs: []string{"file:///etc/passwd"}}, "not an http(s) URL"},
	} {
		_, err := New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

func TestBasicAndProxyAuth(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	srv, _ := newServer(t, db, func(c *Config) {
		c.Auth = Auth{BasicUser: "ops", BasicPassword: "pa55", ProxyHeader: "X-Forwarded-User",
			TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	})
	req := func(mod func(*http.Request)) int {
		r, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/overview", nil)
		mod(r)
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := req(func(*http.Request) {}); c != http.StatusUnauthorized {
		t.Errorf("no credentials: %d", c)
	}
	if c := req(func(r *http.Request) { r.SetBasicAuth("ops", "wrong") }); c != http.StatusUnauthorized {
		t.Errorf("wrong password: %d", c)
	}
	if c := req(func(r *http.Request) { r.SetBasicAuth("ops", "pa55") }); c != http.StatusOK {
		t.Errorf("basic auth: %d", c)
	}
	if c := req(func(r *http.Request) { r.Header.Set("X-Forwarded-User", "alice") }); c != http.StatusOK {
		t.Errorf("proxy header from a trusted proxy: %d", c)
	}
	// The same header from an untrusted address counts for nothing.
	h, err := New(Config{Targets: []Target{{Pool: db.pool, Schema: db.schema}}, Auth: Auth{ProxyHeader: "X-Forwarded-User"}})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/api/overview", nil)
	r.RemoteAddr = "203.0.113.9:4444"
	r.Header.Set("X-Forwarded-User", "mallory")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusUnauthorized {
		t.Errorf("proxy header from an untrusted address: %d", w.Code)
	}
	// Without authentication, a request from off loopback is refused.
	h, _ = New(Config{Targets: []Target{{Pool: db.pool, Schema: db.schema}}})
	r = httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "203.0.113.9:4444"
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusForbidden {
		t.Errorf("unauthenticated dashboard, remote client: %d", w.Code)
	}
}

func TestSessionCookie(t *testing.T) {
	t.Parallel()
	au := newAuthenticator(Auth{Token: "tok"}, "")
	now := time.Now()
	v := au.newSession(now)
	if !au.validSession(v, now) {
		t.Fatal("a fresh session is invalid")
	}
	if au.validSession(v, now.Add(sessionLifetime+time.Second)) {
		t.Error("an expired session is valid")
	}
	if newAuthenticator(Auth{Token: "other"}, "").validSession(v, now) {
		t.Error("a session outlives a token change")
	}
	exp, sig, _ := strings.Cut(v, ".")
	if au.validSession(exp+"9."+sig, now) {
		t.Error("an extended expiry keeps its signature")
	}
}

func TestReadOnlyRefusesChanges(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ids := db.seed(t, seedEvent{Type: "x", State: "dead", Err: "boom"})
	hh, err := New(Config{Targets: []Target{{Pool: db.pool, Schema: db.schema}}, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(hh)
	t.Cleanup(srv.Close)
	_, body := get(t, srv.Client(), srv.URL+"/deadletters")
	if strings.Contains(body, `value="replay"`) || strings.Contains(body, `value="purge"`) {
		t.Error("a read-only dashboard offers replay or purge")
	}
	// A request that passes every CSRF check is still refused.
	secret := strings.Repeat("ab", 32)
	form := url.Values{"csrf": {hh.(*handler).csrf.sign(secret)}, "t": {"0"}, "action": {"purge"}, "scope": {"selection"}, "id": {ids[0].String()}}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/deadletters/apply", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(&http.Cookie{Name: csrfCookie, Value: secret})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "read-only") {
		t.Errorf("a purge on a read-only dashboard: %s %s", resp.Status, b)
	}
	var n int
	_ = db.pool.QueryRow(ctxT(t), `SELECT count(*) FROM `+db.schema+`.outbox_events`).Scan(&n)
	if n != 1 {
		t.Errorf("%d events left after a refused purge", n)
	}
	// The same request on a writable dashboard goes through: the check
	// above refused it for being read-only, nothing else.
	hw, _ := New(Config{Targets: []Target{{Pool: db.pool, Schema: db.schema}}})
	hw.(*handler).csrf.key = hh.(*handler).csrf.key
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, "/deadletters/apply", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.AddCookie(&http.Cookie{Name: csrfCookie, Value: secret})
	r.Host, r.RemoteAddr = "127.0.0.1", "127.0.0.1:4444"
	hw.ServeHTTP(w, r)
	if w.Code != http.StatusSeeOther {
		t.Errorf("the same purge on a writable dashboard: %d %s", w.Code, w.Body)
	}
}
