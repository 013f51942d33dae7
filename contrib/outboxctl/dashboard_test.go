package main

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDashboardRefusesNonLoopbackWithoutAuth: without a token, basic
// auth or a trusted proxy header, outboxctl dashboard will not listen
// beyond loopback, and says how to fix it.
func TestDashboardRefusesNonLoopbackWithoutAuth(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		r := cli(t, env(), "dashboard", "--addr", addr)
		wantOneLineError(t, r, exitError, "refusing to listen on", "without authentication", "OUTBOX_DASHBOARD_TOKEN")
	}
	r := cli(t, env("OUTBOX_DASHBOARD_BASIC_AUTH=nocolon"), "dashboard", "--addr", "0.0.0.0:0")
	wantOneLineError(t, r, exitError, "OUTBOX_DASHBOARD_BASIC_AUTH must be user:password")
}

// TestDashboardServes: the command serves the dashboard on loopback and
// stops on SIGTERM; with a token off loopback it requires it.
func TestDashboardServes(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)
	o.insertSQL(t, 3, "order.placed")
	addrRE := regexp.MustCompile(`dashboard on (http://[0-9.:]+)/`)
	for _, tc := range []struct {
		name    string
		environ []string
		addr    string
		want    int
	}{
		{"loopback", env(), "127.0.0.1:0", http.StatusOK},
		{"token", env("OUTBOX_DASHBOARD_TOKEN=t0ps3cret-value"), "127.0.0.1:0", http.StatusUnauthorized},
	} {
		p := start(t, tc.environ, o.args("dashboard", "--addr", tc.addr)...)
		var base string
		waitFor(t, 30*time.Second, "the dashboard's address", func() bool {
			m := addrRE.FindStringSubmatch(p.stdout.String())
			if m != nil {
				base = m[1]
			}
			return m != nil || p.exited()
		})
		if base == "" {
			t.Fatalf("%s: outboxctl dashboard exited: %s", tc.name, p.stderr.String())
		}
		resp, err := http.Get(base + "/api/overview")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: GET /api/overview: %s %s", tc.name, resp.Status, body)
		}
		if tc.want == http.StatusOK && !strings.Contains(string(body), `"pending":3`) {
			t.Errorf("%s: the overview does not count 3 pending events: %s", tc.name, body)
		}
		p.signal(t, syscall.SIGTERM)
		if code := p.wait(t, 20*time.Second); code != 0 {
			t.Errorf("%s: exit %d after SIGTERM: %s", tc.name, code, p.stderr.String())
		}
		if strings.Contains(p.stderr.String(), "t0ps3cret") {
			t.Errorf("%s: the token is in the log: %s", tc.name, p.stderr.String())
		}
	}
}
