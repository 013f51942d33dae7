package qstashdev_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/outboxkit/outboxkit/internal/qstashdevtest"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

type wireFC struct {
	FlowControlKey      string `json:"flowControlKey"`
	WaitListSize        int    `json:"waitListSize"`
	ParallelismMax      int    `json:"parallelismMax"`
	ParallelismCount    int    `json:"parallelismCount"`
	RateMax             int    `json:"rateMax"`
	RateCount           int    `json:"rateCount"`
	RatePeriod          int64  `json:"ratePeriod"`
	IsPaused            bool   `json:"isPaused"`
	IsPinnedParallelism bool   `json:"isPinnedParallelism"`
	IsPinnedRate        bool   `json:"isPinnedRate"`
}

func getFC(t *testing.T, h *qstashdevtest.Harness, key string) (int, wireFC) {
	t.Helper()
	status, _, b := h.Do(http.MethodGet, "/v2/flowControl/"+key, nil, "")
	var fc wireFC
	if status == http.StatusOK {
		mustJSON(t, b, &fc)
	}
	return status, fc
}

func postFC(t *testing.T, h *qstashdevtest.Harness, path string) {
	t.Helper()
	if status, _, b := h.Do(http.MethodPost, "/v2/flowControl/"+path, nil, ""); status != http.StatusOK {
		t.Fatalf("POST /v2/flowControl/%s: %d %s", path, status, b)
	}
}

func TestFlowControlPauseResume(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	dst := qstashdevtest.NewSink(t, nil)
	// A key with a slash, as the publisher's default (the aggregate) has.
	const key = "order/o-1"
	postFC(t, h, key+"/pause")
	fcHdr := hdr("Upstash-Flow-Control-Key", key, "Upstash-Flow-Control-Value", "parallelism=2")
	for range 3 {
		h.Publish(dst.URL("/p"), fcHdr, "x")
	}
	h.WaitFor("three waiting", func() bool {
		k := h.Server.FlowControlKeys()
		return len(k) == 1 && k[0].WaitListSize == 3
	})
	status, fc := getFC(t, h, key)
	if status != http.StatusOK || !fc.IsPaused || fc.WaitListSize != 3 || fc.ParallelismMax != 2 || fc.FlowControlKey != key {
		t.Fatalf("paused key: %d %+v", status, fc)
	}
	if n := dst.Count(); n != 0 {
		t.Fatalf("a paused key delivered %d", n)
	}
	_, _, b := h.Do(http.MethodGet, "/v2/flowControl", nil, "")
	if !strings.Contains(string(b), `"flowControlKey":"order/o-1"`) {
		t.Fatalf("list: %s", b)
	}
	postFC(t, h, key+"/resume")
	h.WaitIdle()
	if n := dst.Count(); n != 3 {
		t.Fatalf("deliveries after resume: %d, want 3", n)
	}
	// Idle, neither paused nor pinned: forgotten.
	if status, _ := getFC(t, h, key); status != http.StatusNotFound {
		t.Fatalf("idle key: %d, want 404", status)
	}
	if status, _, _ := h.Do(http.MethodPost, "/v2/flowControl/nope/resetRate", nil, ""); status != http.StatusNotFound {
		t.Fatalf("resetRate of an unknown key: %d, want 404", status)
	}
	status, _, b = h.Do(http.MethodGet, "/v2/globalParallelism", nil, "")
	if status != http.StatusOK || !strings.Contains(string(b), `"parallelismMax":32`) {
		t.Fatalf("globalParallelism: %d %s", status, b)
	}
}

func TestFlowControlPinAndResetRate(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	dst := qstashdevtest.NewSink(t, nil)
	// One start per hour: the second message waits for the window.
	slow := hdr("Upstash-Flow-Control-Key", "k", "Upstash-Flow-Control-Value", "rate=1, period=1h")
	h.Publish(dst.URL("/r"), slow, "1")
	h.Publish(dst.URL("/r"), slow, "2")
	h.WaitFor("one delivered, one waiting", func() bool {
		k := h.Server.FlowControlKeys()
		return dst.Count() == 1 && len(k) == 1 && k[0].WaitListSize == 1
	})
	if _, fc := getFC(t, h, "k"); fc.RateMax != 1 || fc.RateCount != 1 || fc.RatePeriod != 3600 {
		t.Fatalf("rate state %+v", fc)
	}
	postFC(t, h, "k/resetRate")
	h.WaitIdle()
	if n := dst.Count(); n != 2 {
		t.Fatalf("deliveries after resetRate: %d, want 2", n)
	}

	// A pinned limit outlives its messages and overrides theirs.
	postFC(t, h, "k/pin?parallelism=1&rate=1&period=3600")
	h.Publish(dst.URL("/r"), hdr("Upstash-Flow-Control-Key", "k", "Upstash-Flow-Control-Value", "parallelism=9, rate=100"), "3")
	h.Publish(dst.URL("/r"), hdr("Upstash-Flow-Control-Key", "k", "Upstash-Flow-Control-Value", "parallelism=9, rate=100"), "4")
	h.WaitFor("one more delivered, one held by the pinned rate", func() bool {
		k := h.Server.FlowControlKeys()
		return dst.Count() == 3 && len(k) == 1 && k[0].WaitListSize == 1
	})
	_, fc := getFC(t, h, "k")
	if !fc.IsPinnedParallelism || !fc.IsPinnedRate || fc.ParallelismMax != 1 || fc.RateMax != 1 {
		t.Fatalf("pinned key %+v", fc)
	}
	postFC(t, h, "k/unpin?parallelism=true&rate=true")
	if _, fc := getFC(t, h, "k"); fc.IsPinnedParallelism || fc.IsPinnedRate || fc.RateMax != 1 {
		t.Fatalf("unpinned key %+v: the pinned values stay until a message brings others", fc)
	}
	h.Publish(dst.URL("/r"), hdr("Upstash-Flow-Control-Key", "k", "Upstash-Flow-Control-Value", "rate=100"), "5")
	h.WaitIdle()
	if n := dst.Count(); n != 5 {
		t.Fatalf("deliveries after unpin and a faster message: %d, want 5", n)
	}
	if status, _, _ := h.Do(http.MethodPost, "/v2/flowControl/k/pin", nil, ""); status != http.StatusBadRequest {
		t.Fatalf("pin without values: %d, want 400", status)
	}
}
