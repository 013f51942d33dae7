package qstash_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/adapters/memory"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/qstash"
)

// TestPublishConfigurationErrorsStayPending: a 4xx that speaks of the
// configuration (a destination QStash refuses, an unknown URL group or
// queue, a BaseURL that is not the QStash API, a refused token) is
// transient, matches qstash.ErrConfiguration and says in its text what to
// fix, for a single publish and for a batch alike. Dead-lettering on such an
// answer would empty the outbox into its dead letters within seconds.
func TestPublishConfigurationErrorsStayPending(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
		body   string
		fix    string // a phrase the error must carry
	}{
		{"400 bad destination", 400, `{"error":"invalid destination url: endpoint resolves to a private address"}`, "Destination"},
		{"400 bad option", 400, `{"error":"failed to parse Upstash-Retry-Delay"}`, "RetryDelay"},
		{"404 unknown URL group", 404, `{"error":"topic shiping not found"}`, "URL group"},
		{"404 unknown queue", 404, `{"error":"queue not found"}`, "queue"},
		{"404 not the API", 404, "404 page not found\n", "BaseURL"},
		{"405 not the API", 405, "", "BaseURL"},
		{"401 token", 401, `{"error":"invalid token"}`, "QSTASH_TOKEN"},
		{"403 read-only token", 403, `{"error":"forbidden"}`, "QSTASH_TOKEN"},
	} {
		for _, n := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s/%d events", tc.name, n), func(t *testing.T) {
				t.Parallel()
				f := newFakeQStash(t, answer(tc.status, nil, tc.body))
				p := newTestPublisher(t, f)
				err := p.Publish(context.Background(), events(t, n))
				if err == nil {
					t.Fatal("Publish succeeded")
				}
				if core.IsPermanent(err) {
					t.Errorf("%d %s is permanent: the relay would dead-letter every event (%v)", tc.status, tc.body, err)
				}
				if !errors.Is(err, qstash.ErrConfiguration) {
					t.Errorf("err = %v, want it to match qstash.ErrConfiguration", err)
				}
				var apiErr *qstash.APIError
				if !errors.As(err, &apiErr) || apiErr.StatusCode != tc.status {
					t.Fatalf("err = %v, want an *APIError with status %d", err, tc.status)
				}
				if msg := err.Error(); !strings.Contains(msg, tc.fix) || !strings.Contains(msg, "pending") {
					t.Errorf("error text %q does not name the fix (%q) and say the events stay pending", msg, tc.fix)
				}
				for i, e := range core.EventErrors(n, err) {
					if e == nil || core.IsPermanent(e) {
						t.Errorf("event %d: err = %v, want transient", i, e)
					}
				}
			})
		}
	}
}

// TestPublishEventCausedErrorsArePermanent: what only the event can cause
// stays permanent — a message larger than the plan allows (413, or a 400 or
// a batch element saying so) — and does not match ErrConfiguration.
func TestPublishEventCausedErrorsArePermanent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
		body   string
	}{
		{"413", 413, `{"error":"request body is larger than 1048576 bytes"}`},
		{"400 size", 400, `{"error":"message size exceeds the limit of 1MB for your plan"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeQStash(t, answer(tc.status, nil, tc.body))
			p := newTestPublisher(t, f)
			err := p.Publish(context.Background(), events(t, 1))
			if !core.IsPermanent(err) || errors.Is(err, qstash.ErrConfiguration) {
				t.Fatalf("err = %v, want permanent and not a configuration error", err)
			}
		})
	}
}

// TestPublishBatchElementErrorsAreClassifiedByCause: in a batch answer, an
// element refused for its size is permanent (that event alone is
// dead-lettered), while one refused for its destination (an unknown URL
// group, say) is transient like the same answer to a single publish.
func TestPublishBatchElementErrorsAreClassifiedByCause(t *testing.T) {
	t.Parallel()
	f := newFakeQStash(t, answer(200, nil, `[{"messageId":"a"},{"error":"message body is larger than 1048576 bytes"},{"error":"url group \"audit\" not found: create it with POST /v2/topics/audit/endpoints"},{"messageId":"d"}]`))
	p := newTestPublisher(t, f)
	errs := core.EventErrors(4, p.Publish(context.Background(), events(t, 4)))
	if errs[0] != nil || errs[3] != nil {
		t.Errorf("accepted events reported failed: %v", errs)
	}
	if !core.IsPermanent(errs[1]) || errors.Is(errs[1], qstash.ErrConfiguration) {
		t.Errorf("oversized element: err = %v, want permanent", errs[1])
	}
	if errs[2] == nil || core.IsPermanent(errs[2]) || !errors.Is(errs[2], qstash.ErrConfiguration) || !strings.Contains(errs[2].Error(), "URL group") {
		t.Errorf("unknown URL group element: err = %v, want a transient configuration error naming the URL group", errs[2])
	}
}

// TestPublishBatchTooLargeFallsBackToSingles: a 413 for a whole batch is
// about the batch's size, not any one event's: the events are published one
// by one, and only one too large on its own is dead-lettered.
func TestPublishBatchTooLargeFallsBackToSingles(t *testing.T) {
	t.Parallel()
	f := newFakeQStash(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		switch {
		case r.URL.Path == "/v2/batch":
			answer(413, nil, `{"error":"request body is larger than 1048576 bytes"}`)(w, r, body)
		case strings.Contains(string(body), `"big"`):
			answer(413, nil, `{"error":"request body is larger than 1048576 bytes"}`)(w, r, body)
		default:
			answerOK(w, r, body)
		}
	})
	p := newTestPublisher(t, f)
	evs := events(t, 3)
	evs[1].Payload = []byte(`{"big":true}`)
	errs := core.EventErrors(3, p.Publish(context.Background(), evs))
	if errs[0] != nil || errs[2] != nil || !core.IsPermanent(errs[1]) {
		t.Fatalf("errs = %v, want only the oversized event to fail, permanently", errs)
	}
	if n := len(f.requests()); n != 4 {
		t.Errorf("%d requests, want the batch and three single publishes", n)
	}
}

// TestRelayKeepsEventsPendingWhileMisconfigured runs the whole path: a relay
// over a store publishing to a QStash that answers 404 for the URL group.
// Nothing is dead-lettered, and the error recorded on each event (what
// operators read in the outbox and in the relay's warning) says what to fix.
func TestRelayKeepsEventsPendingWhileMisconfigured(t *testing.T) {
	t.Parallel()
	f := newFakeQStash(t, answer(404, nil, `{"error":"topic shiping not found"}`))
	p := newTestPublisher(t, f, func(c *qstash.PublisherConfig) { c.Destination = qstash.Target{URLGroup: "shiping"} })
	store := memory.NewStore(nil)
	evs := events(t, 3)
	if err := store.Add(context.Background(), evs...); err != nil {
		t.Fatal(err)
	}
	// Two attempts allowed, and more drains than that: configuration
	// failures must not count as attempts.
	relay, err := core.NewRelay(store, p, &core.RelayConfig{Clock: fixedClock{testNow},
		Retry: core.RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Nanosecond, MaxBackoff: time.Nanosecond}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if _, err := relay.Drain(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range evs {
		st, ok := store.Get(e.ID)
		if !ok {
			t.Fatalf("event %s gone", e.ID)
		}
		if !st.DeadAt.IsZero() || !st.PublishedAt.IsZero() {
			t.Errorf("event %s: dead at %v, published at %v; want it pending", e.ID, st.DeadAt, st.PublishedAt)
		}
		if st.Event.Attempts != 0 {
			t.Errorf("event %s: %d attempts counted for configuration failures", e.ID, st.Event.Attempts)
		}
		if !strings.Contains(st.LastError, "URL group") || !strings.Contains(st.LastError, "shiping") {
			t.Errorf("event %s: last error %q does not name the URL group to fix", e.ID, st.LastError)
		}
	}
}
