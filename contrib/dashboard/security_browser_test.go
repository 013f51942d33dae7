package dashboard

import (
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserRefusesForgedCrossSitePost: a page of another site that
// submits the apply form (purge a dead letter) is refused, and nothing is
// purged.
func TestBrowserRefusesForgedCrossSitePost(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ids := db.seed(t, seedEvent{Type: "invoice.sent", State: "dead", Err: "boom"})
	srv, logs := newServer(t, db, nil)
	// The attacker's page, on another origin (localhost, not 127.0.0.1):
	// it cannot read the dashboard's CSRF token, so it guesses one.
	target := srv.URL + "/deadletters/apply"
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><html lang="en"><title>cute cats</title><body>
<form id="f" method="post" action="%s">
<input name="t" value="0"><input name="action" value="purge"><input name="scope" value="selection">
<input name="id" value="%s"><input name="csrf" value="guessed"></form>
<script>document.getElementById("f").submit()</script></body></html>`, html.EscapeString(target), ids[0])
	}))
	t.Cleanup(evil.Close)
	u, _ := url.Parse(evil.URL)
	ctx := browser(t, "")
	// The browser has visited the dashboard first, so it holds a CSRF
	// cookie the forged request carries.
	do(t, ctx, "visit the dashboard", chromedp.Navigate(srv.URL+"/deadletters"), chromedp.WaitVisible(css("table.groups")))
	do(t, ctx, "visit the attacker's page", chromedp.Navigate("http://localhost:"+u.Port()+"/"))
	waitURL(t, ctx, "/deadletters/apply")
	do(t, ctx, "wait for the answer", chromedp.WaitVisible(css("body")))
	body := text(t, ctx, "body")
	if !strings.Contains(body, "Refused") {
		t.Errorf("the forged POST was answered with:\n%s", body)
	}
	if n := deadCount(t, db); n != 1 {
		t.Errorf("%d dead letters after the forged purge, want 1", n)
	}
	if !strings.Contains(logs.String(), "dashboard refused a change") {
		t.Errorf("the refusal was not logged:\n%s", logs.String())
	}
	// The same form from the dashboard's own origin without the token is
	// refused too (a browser that sends no Sec-Fetch-Site).
	resp, err := http.PostForm(target, url.Values{"t": {"0"}, "action": {"purge"}, "scope": {"selection"}, "id": {ids[0].String()}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || deadCount(t, db) != 1 {
		t.Errorf("a POST without a CSRF token: %s, %d dead letters left", resp.Status, deadCount(t, db))
	}
}

// TestBrowserRendersDatabaseValuesInert: an event type, payload, header,
// aggregate, destination and error holding markup show as text on every
// page, and no script runs.
func TestBrowserRendersDatabaseValuesInert(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	const xss = `<script>window.__xss=1</script><img src=x onerror="window.__xss=2">`
	ids := db.seed(t,
		seedEvent{Type: xss, AggType: `<b onmouseover=alert(1)>`, AggID: `"><script>window.__xss=3</script>`,
			Dest: `javascript:window.__xss=4`, Payload: `{"html":"<script>window.__xss=5</script>","x":"</pre><img src=x onerror=window.__xss=6>"}`,
			Headers: map[string]string{"traceparent": `00-"><script>window.__xss=7</script>`, "x-note": `<svg onload=window.__xss=8>`},
			State:   "dead", Err: `<script>window.__xss=9</script> failed`},
		seedEvent{Type: xss, State: "pending"},
	)
	srv, _ := newServer(t, db, nil)
	ctx := browser(t, "")
	group := groupKey(xss, normaliseError(`<script>window.__xss=9</script> failed`))
	for _, p := range []string{
		"/", "/events", "/events?state=dead", "/events?type=" + url.QueryEscape(xss),
		"/event?t=0&id=" + ids[0].String(), "/deadletters", "/deadletters/group?t=0&g=" + group,
	} {
		do(t, ctx, "load "+p, chromedp.Navigate(srv.URL+p), chromedp.WaitVisible(css("main")))
		if got := eval[string](t, ctx, `String(window.__xss)`); got != "undefined" {
			t.Errorf("%s ran injected script: window.__xss = %s", p, got)
		}
		if n := eval[int](t, ctx, `document.querySelectorAll("main script, main img, main svg, main b").length`); n != 0 {
			t.Errorf("%s holds %d injected elements", p, n)
		}
		if p != "/" && !strings.Contains(text(t, ctx, "main"), "<script>window.__xss") {
			t.Errorf("%s does not show the markup as text:\n%s", p, text(t, ctx, "main"))
		}
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('a[href^="javascript:"]').length`); n != 0 {
		t.Errorf("a javascript: link made it into the page")
	}
}

// TestBrowserLogin: with a token, a browser is sent to /login, a wrong
// token is refused, the right one lets it in (addressed by a
// non-loopback name), and logging out ends the session. Without
// authentication the dashboard refuses requests addressed by a
// non-loopback name.
func TestBrowserLogin(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	standardSeed(t, db)
	const token = "correct-horse-battery-staple"
	srv, _ := newServer(t, db, func(c *Config) { c.Auth.Token = token })
	open, _ := newServer(t, db, nil)
	su, _ := url.Parse(srv.URL)
	ou, _ := url.Parse(open.URL)
	// dashboard.test resolves to 127.0.0.1 in this browser only: a name
	// that is not loopback, as the dashboard sees the Host.
	ctx := browser(t, "MAP dashboard.test 127.0.0.1")
	base := "http://dashboard.test:" + su.Port()

	do(t, ctx, "open the overview without a session", chromedp.Navigate(base+"/events?state=dead"))
	waitURL(t, ctx, "/login")
	do(t, ctx, "wait for the login form", chromedp.WaitVisible(css("#token")))
	checkA11y(t, ctx, "the login page")
	do(t, ctx, "type a wrong token", chromedp.SendKeys(css("#token"), "guess"), chromedp.Submit(css("#token")))
	do(t, ctx, "wait for the refusal", chromedp.WaitVisible(css("p.error")))
	if got := text(t, ctx, "p.error"); got != "That token is not the dashboard's token." {
		t.Errorf("a wrong token: %q", got)
	}
	do(t, ctx, "type the token", chromedp.SendKeys(css("#token"), token), chromedp.Submit(css("#token")))
	waitURL(t, ctx, "/events?state=dead")
	do(t, ctx, "wait for the events", chromedp.WaitVisible(css("table.events")))
	if n := eval[int](t, ctx, `document.querySelectorAll("table.events tbody td.id").length`); n != 4 {
		t.Errorf("logged in, the dead events list shows %d, want 4", n)
	}
	if strings.Contains(eval[string](t, ctx, `document.documentElement.outerHTML`), token) {
		t.Errorf("a page holds the token")
	}
	do(t, ctx, "log out", chromedp.Click(css(`form[action$="/logout"] button`)))
	waitURL(t, ctx, "/login")
	do(t, ctx, "open the overview after logging out", chromedp.Navigate(base+"/"))
	waitURL(t, ctx, "/login")

	// Without the token, a client gets nothing but the login page.
	resp, body := get(t, http.DefaultClient, srv.URL+"/api/overview")
	if resp.StatusCode != http.StatusUnauthorized || strings.Contains(body, "pending") {
		t.Errorf("the API without a token: %s %q", resp.Status, body)
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/overview", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("the API with the bearer token: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// No authentication: a non-loopback name is refused.
	do(t, ctx, "open the unauthenticated dashboard by name", chromedp.Navigate("http://dashboard.test:"+ou.Port()+"/"), chromedp.WaitVisible(css("body")))
	if got := text(t, ctx, "body"); !strings.Contains(got, "answers only requests from this machine addressed to 127.0.0.1 or localhost") {
		t.Errorf("the unauthenticated dashboard under a non-loopback name answered:\n%s", got)
	}
}
