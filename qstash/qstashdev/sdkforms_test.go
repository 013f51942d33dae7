package qstashdev_test

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/outboxkit/outboxkit/internal/qstashdevtest"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

// The official TypeScript SDK (@upstash/qstash) sends bulk IDs and filters
// as repeated query parameters with no body, as Upstash's API reference
// documents them. These tests send exactly those requests; the TypeScript
// suite (internal/interop/qstashts) sends them through the SDK itself.

// delayedMessages publishes n messages that stay pending for an hour.
func delayedMessages(t *testing.T, h *qstashdevtest.Harness, dst *qstashdevtest.Sink, n int, header ...string) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = h.Publish(dst.URL("/d"), hdr(append([]string{"Upstash-Delay", "1h"}, header...)...), "x")
	}
	return ids
}

func pendingIDs(h *qstashdevtest.Harness) []string {
	var out []string
	for _, m := range h.Server.Messages() {
		out = append(out, m.ID)
	}
	sort.Strings(out)
	return out
}

// A cancel naming messages in the query must cancel those and nothing
// else. qstashdev once read only a JSON body, took the empty body for
// "cancel all", and cancelled every pending message.
func TestCancelByQueryIDsCancelsOnlyThose(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	dst := qstashdevtest.NewSink(t, nil)
	ids := delayedMessages(t, h, dst, 3)

	status, _, b := h.Do(http.MethodDelete, "/v2/messages?messageIds="+ids[0]+"&messageIds="+ids[1], nil, "")
	if status != http.StatusAccepted {
		t.Fatalf("DELETE /v2/messages?messageIds=…: %d %s, want 202", status, b)
	}
	var res struct {
		Cancelled int `json:"cancelled"`
	}
	mustJSON(t, b, &res)
	if res.Cancelled != 2 {
		t.Errorf("cancelled %d, want 2", res.Cancelled)
	}
	if got := pendingIDs(h); strings.Join(got, ",") != ids[2] {
		t.Fatalf("pending after cancelling two by query: %v, want only %s", got, ids[2])
	}
	for _, id := range ids[:2] {
		if got := strings.Join(h.States(id), ","); got != "CREATED,CANCEL_REQUESTED,CANCELLED" {
			t.Errorf("%s states %s", id, got)
		}
	}
}

// The body form (the Go SDK's) keeps working, and IDs given both ways are
// cancelled together.
func TestCancelByBodyAndQueryIDs(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	dst := qstashdevtest.NewSink(t, nil)
	ids := delayedMessages(t, h, dst, 4)
	status, _, b := h.Do(http.MethodDelete, "/v2/messages?messageIds="+ids[0], nil, `{"messageIds":["`+ids[1]+`"]}`)
	if status != http.StatusAccepted || !strings.Contains(string(b), `"cancelled":2`) {
		t.Fatalf("cancel by query and body: %d %s", status, b)
	}
	if got := pendingIDs(h); strings.Join(got, ",") != ids[2]+","+ids[3] {
		t.Fatalf("pending %v", got)
	}
}

// A filter that qstashdev does not know must not widen a destructive
// request into "all": it is refused.
func TestBulkCancelRefusesUnknownParameters(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	dst := qstashdevtest.NewSink(t, nil)
	delayedMessages(t, h, dst, 2)
	for _, q := range []string{"messageId=msg_x", "lable=typo", "messageIds="} {
		status, _, b := h.Do(http.MethodDelete, "/v2/messages?"+q, nil, "")
		if status != http.StatusBadRequest {
			t.Errorf("DELETE /v2/messages?%s: %d %s, want 400", q, status, b)
		}
	}
	if n := len(h.Server.Messages()); n != 2 {
		t.Fatalf("%d messages pending after refused cancels, want 2", n)
	}
}

func TestBulkCancelByFilter(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	dst := qstashdevtest.NewSink(t, nil)
	a := delayedMessages(t, h, dst, 2, "Upstash-Label", "a,shared")
	b := delayedMessages(t, h, dst, 1, "Upstash-Label", "b")
	c := delayedMessages(t, h, dst, 1, "Upstash-Flow-Control-Key", "k", "Upstash-Flow-Control-Value", "parallelism=1")
	status, _, body := h.Do(http.MethodDelete, "/v2/messages?label=b&label=zzz", nil, "")
	if status != http.StatusAccepted || !strings.Contains(string(body), `"cancelled":1`) {
		t.Fatalf("cancel label=b: %d %s", status, body)
	}
	status, _, body = h.Do(http.MethodDelete, "/v2/messages?flowControlKey=k", nil, "")
	if status != http.StatusAccepted || !strings.Contains(string(body), `"cancelled":1`) {
		t.Fatalf("cancel flowControlKey=k: %d %s", status, body)
	}
	want := append([]string(nil), a...)
	sort.Strings(want)
	if got := pendingIDs(h); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("pending %v, want %v (b %v and c %v cancelled)", got, want, b, c)
	}
	// The host filter matches the destination's host; comma-separated
	// labels are several values.
	status, _, body = h.Do(http.MethodDelete, "/v2/messages?label=nope,shared&host="+strings.TrimPrefix(dst.URL(""), "http://"), nil, "")
	if status != http.StatusAccepted || !strings.Contains(string(body), `"cancelled":2`) {
		t.Fatalf("cancel label=nope,shared&host: %d %s", status, body)
	}
	// No IDs and no filter: all, as the API reference says (the SDK's
	// {all: true} sends count alone).
	delayedMessages(t, h, dst, 2)
	status, _, body = h.Do(http.MethodDelete, "/v2/messages?count=100", nil, "")
	if status != http.StatusAccepted || !strings.Contains(string(body), `"cancelled":2`) {
		t.Fatalf("cancel all: %d %s", status, body)
	}
}

// messages.cancel(id) parses the answer as JSON.
func TestCancelOneAnswersJSON(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	dst := qstashdevtest.NewSink(t, nil)
	ids := delayedMessages(t, h, dst, 1)
	status, header, b := h.Do(http.MethodDelete, "/v2/messages/"+ids[0], nil, "")
	if status != http.StatusAccepted || header.Get("Content-Type") != "application/json" {
		t.Fatalf("cancel: %d %s %q", status, header.Get("Content-Type"), b)
	}
	var res struct {
		Cancelled *int `json:"cancelled"`
	}
	if err := json.Unmarshal(b, &res); err != nil || res.Cancelled == nil || *res.Cancelled != 1 {
		t.Fatalf("cancel answer %q (%v), want {\"cancelled\":1}", b, err)
	}
}

// failedMessages sends n messages to a destination that fails, with no
// retries, and returns their DLQ ids in failure order.
func failedMessages(t *testing.T, h *qstashdevtest.Harness, dst *qstashdevtest.Sink, n int, header ...string) []string {
	t.Helper()
	for range n {
		h.Publish(dst.URL("/fail"), hdr(append([]string{"Upstash-Retries", "0"}, header...)...), "x")
		h.WaitIdle()
	}
	var ids []string
	for _, e := range h.Server.DLQ() {
		ids = append(ids, e.DLQID)
	}
	return ids[len(ids)-n:]
}

func failingSink(t *testing.T) *qstashdevtest.Sink {
	return qstashdevtest.NewSink(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if strings.HasPrefix(r.URL.Path, "/fail") {
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
}

func dlqIDs(h *qstashdevtest.Harness) []string {
	var out []string
	for _, e := range h.Server.DLQ() {
		out = append(out, e.DLQID)
	}
	return out
}

func TestDLQListByQueryIDs(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	dst := failingSink(t)
	ids := failedMessages(t, h, dst, 3)
	status, _, b := h.Do(http.MethodGet, "/v2/dlq?dlqIds="+ids[0]+"&dlqIds="+ids[2], nil, "")
	if status != http.StatusOK {
		t.Fatalf("list by dlqIds: %d %s", status, b)
	}
	var res struct {
		Messages []struct {
			DlqID string `json:"dlqId"`
		} `json:"messages"`
	}
	mustJSON(t, b, &res)
	if len(res.Messages) != 2 || res.Messages[0].DlqID != ids[0] || res.Messages[1].DlqID != ids[2] {
		t.Fatalf("listed %+v, want %s and %s only", res.Messages, ids[0], ids[2])
	}
}

func TestDLQRetryByQueryIDs(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	dst := failingSink(t)
	ids := failedMessages(t, h, dst, 3)
	status, _, b := h.Do(http.MethodPost, "/v2/dlq/retry?dlqIds="+ids[0]+"&dlqIds="+ids[1], nil, "")
	if status != http.StatusCreated {
		t.Fatalf("retry by dlqIds: %d %s, want 201", status, b)
	}
	var res struct {
		Responses []struct {
			MessageID string `json:"messageId"`
		} `json:"responses"`
	}
	mustJSON(t, b, &res)
	if len(res.Responses) != 2 || !strings.HasPrefix(res.Responses[0].MessageID, "msg_") || !strings.HasPrefix(res.Responses[1].MessageID, "msg_") {
		t.Fatalf("retry answer %s", b)
	}
	h.WaitIdle()
	// The two retried messages failed again, under new DLQ ids; the third
	// was never touched.
	left := dlqIDs(h)
	if len(left) != 3 || left[0] != ids[2] {
		t.Fatalf("DLQ after retry %v, want %s first and two new entries", left, ids[2])
	}
	// One unknown id refuses the whole request, retrying nothing.
	if status, _, b := h.Do(http.MethodPost, "/v2/dlq/retry?dlqIds="+ids[2]+"&dlqIds=nope", nil, ""); status != http.StatusNotFound {
		t.Fatalf("retry with an unknown id: %d %s, want 404", status, b)
	}
	if got := dlqIDs(h); strings.Join(got, ",") != strings.Join(left, ",") {
		t.Fatalf("a refused retry changed the DLQ: %v", got)
	}
}

func TestDLQDeleteByQueryIDs(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	dst := failingSink(t)
	ids := failedMessages(t, h, dst, 3)
	status, _, b := h.Do(http.MethodDelete, "/v2/dlq?dlqIds="+ids[0]+"&dlqIds="+ids[2], nil, "")
	if status != http.StatusOK || !strings.Contains(string(b), `"deleted":2`) {
		t.Fatalf("delete by dlqIds: %d %s", status, b)
	}
	if got := dlqIDs(h); strings.Join(got, ",") != ids[1] {
		t.Fatalf("DLQ %v, want only %s", got, ids[1])
	}
	// The body form (the Go SDK's) still works.
	status, _, b = h.Do(http.MethodDelete, "/v2/dlq", nil, `{"dlqIds":["`+ids[1]+`"]}`)
	if status != http.StatusOK || !strings.Contains(string(b), `"deleted":1`) {
		t.Fatalf("delete by body: %d %s", status, b)
	}
}

func TestDLQBulkByFilterAndAll(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	dst := failingSink(t)
	failedMessages(t, h, dst, 2, "Upstash-Label", "x")
	keep := failedMessages(t, h, dst, 1, "Upstash-Label", "y")
	status, _, b := h.Do(http.MethodDelete, "/v2/dlq?label=x", nil, "")
	if status != http.StatusOK || !strings.Contains(string(b), `"deleted":2`) {
		t.Fatalf("delete label=x: %d %s", status, b)
	}
	if got := dlqIDs(h); strings.Join(got, ",") != keep[0] {
		t.Fatalf("DLQ %v, want %v", got, keep)
	}
	// host and path are not DLQ filters: refused, not ignored.
	if status, _, b := h.Do(http.MethodDelete, "/v2/dlq?host=x", nil, ""); status != http.StatusBadRequest {
		t.Fatalf("delete host=x: %d %s, want 400", status, b)
	}
	failedMessages(t, h, dst, 2)
	// all: true, one page at a time with a cursor.
	status, _, b = h.Do(http.MethodDelete, "/v2/dlq?count=2", nil, "")
	var page struct {
		Deleted int    `json:"deleted"`
		Cursor  string `json:"cursor"`
	}
	mustJSON(t, b, &page)
	if status != http.StatusOK || page.Deleted != 2 || page.Cursor == "" {
		t.Fatalf("first page: %d %s", status, b)
	}
	status, _, b = h.Do(http.MethodDelete, "/v2/dlq?count=2&cursor="+page.Cursor, nil, "")
	page.Cursor = ""
	mustJSON(t, b, &page)
	if status != http.StatusOK || page.Deleted != 1 || page.Cursor != "" {
		t.Fatalf("second page: %d %s", status, b)
	}
	if n := len(h.Server.DLQ()); n != 0 {
		t.Fatalf("%d DLQ entries left", n)
	}
}

// label: [a, b] reaches the server as one header "a,b": two labels, each a
// filter of its own, listed as labels (label keeps the first).
func TestSeveralLabels(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	dst := failingSink(t)
	id := h.Publish(dst.URL("/fail"), hdr("Upstash-Label", "a,b", "Upstash-Retries", "0"), "x")
	h.WaitIdle()
	for _, l := range []string{"a", "b"} {
		status, _, b := h.Do(http.MethodGet, "/v2/events?label="+l, nil, "")
		if status != http.StatusOK || !strings.Contains(string(b), id) {
			t.Errorf("events label=%s: %d %s, want %s", l, status, b, id)
		}
		status, _, b = h.Do(http.MethodGet, "/v2/dlq?label="+l, nil, "")
		if status != http.StatusOK || !strings.Contains(string(b), id) {
			t.Errorf("dlq label=%s: %d %s, want %s", l, status, b, id)
		}
	}
	if _, _, b := h.Do(http.MethodGet, "/v2/events?label=a,b", nil, ""); !strings.Contains(string(b), id) {
		t.Errorf("events label=a,b: %s", b)
	}
	_, _, b := h.Do(http.MethodGet, "/v2/dlq", nil, "")
	var res struct {
		Messages []struct {
			Label  string   `json:"label"`
			Labels []string `json:"labels"`
		} `json:"messages"`
	}
	mustJSON(t, b, &res)
	if len(res.Messages) != 1 || res.Messages[0].Label != "a" || strings.Join(res.Messages[0].Labels, "|") != "a|b" {
		t.Fatalf("dlq entry labels %+v", res.Messages)
	}
	if d := h.Server.DLQ(); len(d) != 1 || strings.Join(d[0].Message.Labels, "|") != "a|b" {
		t.Fatalf("DLQ() labels %+v", d)
	}
}

// logs({messageIds}) and every multi-value filter keep all their values.
func TestEventsMultiValueFilters(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	dst := qstashdevtest.NewSink(t, nil)
	a := h.Publish(dst.URL("/a"), hdr("Upstash-Label", "la"), "x")
	b := h.Publish(dst.URL("/b"), hdr("Upstash-Label", "lb"), "x")
	c := h.Publish(dst.URL("/c"), hdr("Upstash-Label", "lc"), "x")
	h.WaitIdle()
	got := func(q string) map[string]int {
		t.Helper()
		status, _, body := h.Do(http.MethodGet, "/v2/events?"+q, nil, "")
		if status != http.StatusOK {
			t.Fatalf("events?%s: %d %s", q, status, body)
		}
		var res struct {
			Events []struct {
				MessageID string `json:"messageId"`
			} `json:"events"`
		}
		mustJSON(t, body, &res)
		n := map[string]int{}
		for _, e := range res.Events {
			n[e.MessageID]++
		}
		return n
	}
	for _, q := range []string{
		"messageIds=" + a + "&messageIds=" + c,
		"url=" + dst.URL("/a") + "&url=" + dst.URL("/c"),
		"label=la&label=lc",
		"label=la,lc",
		"path=/a&path=/c",
	} {
		n := got(q)
		if n[a] != 3 || n[c] != 3 || n[b] != 0 {
			t.Errorf("events?%s: %v, want 3 events each of %s and %s, none of %s", q, n, a, c, b)
		}
	}
	if n := got("state=CREATED&state=DELIVERED&messageIds=" + a); n[a] != 2 {
		t.Errorf("two states: %v", n)
	}
	if n := got("state=IN_PROGRESS&messageIds=" + a); n[a] != 1 {
		t.Errorf("IN_PROGRESS (ACTIVE, RETRY or ERROR): %v, want the ACTIVE event", n)
	}
	// /v2/logs is the same log under its new name.
	status, _, body := h.Do(http.MethodGet, "/v2/logs?messageIds="+b, nil, "")
	if status != http.StatusOK || !strings.Contains(string(body), `"logs":[`) || !strings.Contains(string(body), b) {
		t.Errorf("/v2/logs: %d %s", status, body)
	}
}

// QStash's API names the state CANCELLED; the TypeScript SDK's State type
// spells it CANCELED. The log says CANCELLED, and a filter takes either.
func TestCancelledSpelling(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	dst := qstashdevtest.NewSink(t, nil)
	ids := delayedMessages(t, h, dst, 1)
	if !h.Server.Cancel(ids[0]) {
		t.Fatal("Cancel")
	}
	for _, s := range []string{"CANCELLED", "CANCELED"} {
		_, _, b := h.Do(http.MethodGet, "/v2/events?state="+s, nil, "")
		if !strings.Contains(string(b), `"state":"CANCELLED"`) || strings.Contains(string(b), "CREATED") {
			t.Errorf("state=%s: %s", s, b)
		}
	}
}
