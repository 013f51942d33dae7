package dashboard

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// standardSeed is a small table with every state, two destinations and
// a dead-letter group of three.
func standardSeed(t testing.TB, db testDB) {
	t.Helper()
	db.seed(t,
		seedEvent{Type: "order.placed", AggType: "order", AggID: "1", Dest: "https://billing.example/hook", State: "published", PublishedAgo: 5 * time.Minute, Latency: 40 * time.Millisecond},
		seedEvent{Type: "order.placed", AggType: "order", AggID: "2", Dest: "https://billing.example/hook", State: "published", PublishedAgo: 3 * time.Minute, Latency: 80 * time.Millisecond},
		seedEvent{Type: "order.placed", AggType: "order", AggID: "3", State: "pending"},
		seedEvent{Type: "order.shipped", AggType: "order", AggID: "1", State: "leased"},
		seedEvent{Type: "invoice.sent", AggType: "invoice", AggID: "7", Dest: "https://mail.example/hook", State: "dead", Err: "publish: POST https://user:hunter2@mail.example/hook: 503 Service Unavailable (request 8123)"},
		seedEvent{Type: "invoice.sent", AggType: "invoice", AggID: "8", Dest: "https://mail.example/hook", State: "dead", Err: "publish: POST https://user:hunter2@mail.example/hook: 503 Service Unavailable (request 9411)"},
		seedEvent{Type: "invoice.sent", AggType: "invoice", AggID: "9", Dest: "https://mail.example/hook", State: "dead", Err: "publish: POST https://user:hunter2@mail.example/hook: 503 Service Unavailable (request 77)"},
		seedEvent{Type: "invoice.voided", AggType: "invoice", AggID: "9", State: "dead", Err: "permanent: payload does not decode: json: cannot unmarshal string into Go value of type int"},
	)
}

func TestPagesRender(t *testing.T) {
	t.Parallel()
	for _, layout := range layouts {
		t.Run(layout.String(), func(t *testing.T) {
			t.Parallel()
			pagesRender(t, newDBLayout(t, layout))
		})
	}
}

func pagesRender(t *testing.T, db testDB) {
	standardSeed(t, db)
	srv, _ := newServer(t, db, nil)
	c := srv.Client()
	for _, tc := range []struct {
		path string
		want []string
	}{
		{"/", []string{"Pending", "https://billing.example/hook", "(relay&#39;s default)"}},
		{"/events", []string{"order.placed", "invoice.sent"}},
		{"/events?state=dead", []string{"invoice.voided"}},
		{"/events?state=pending&type=order.placed", []string{"order.placed"}},
		{"/events?state=published", []string{"published"}},
		{"/events?state=leased", []string{"order.shipped"}},
		{"/events?aggregate=invoice/9", []string{"invoice.voided"}},
		{"/deadletters", []string{"invoice.sent", "3</td>", "[redacted]"}},
	} {
		resp, body := get(t, c, srv.URL+tc.path)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %s\n%s", tc.path, resp.Status, body)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(body, w) {
				t.Errorf("GET %s lacks %q:\n%s", tc.path, w, body)
			}
		}
		if strings.Contains(body, "hunter2") {
			t.Errorf("GET %s shows a password", tc.path)
		}
	}
	_ = url.Values{}
}
