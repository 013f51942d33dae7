package qstash_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/qstash"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

const (
	usCurrentKey = "sig_usCurrentRegionKeyForTests"
	usNextKey    = "sig_usNextRegionKeyForTestsXX"
)

// A receiver of a multi-region account verifies each delivery with the
// keys of the region its Upstash-Region header names: two qstashdev
// servers, one per region and each with its own keys, deliver to one
// Receiver that holds both regions' keys and no default ones.
func TestReceiverPicksKeysByRegion(t *testing.T) {
	t.Parallel()
	h := &countingHandler{}
	var url string
	var rc *qstash.Receiver
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { rc.ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	url = srv.URL + "/orders"
	var err error
	rc, err = qstash.NewReceiver(&qstash.ReceiverConfig{
		Regions: map[string]qstash.RegionKeys{
			"EU_CENTRAL_1": {Current: qstashdev.DefaultCurrentSigningKey, Next: qstashdev.DefaultNextSigningKey},
			"us-east-1":    {Current: usCurrentKey, Next: usNextKey},
		},
		URL: url, Handler: h, Deduper: &recordingDeduper{}, Consumer: "billing",
	})
	if err != nil {
		t.Fatal(err)
	}
	events := map[string]core.Event{}
	for _, region := range []string{"EU_CENTRAL_1", "US_EAST_1"} {
		cfg := qstashdev.Config{Region: region}
		if region == "US_EAST_1" {
			cfg.CurrentSigningKey, cfg.NextSigningKey = usCurrentKey, usNextKey
		}
		dev, err := qstashdev.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		api := httptest.NewServer(dev.Handler())
		t.Cleanup(func() { dev.Close(); api.Close() })
		pub, err := qstash.NewPublisher(&qstash.PublisherConfig{Region: region, BaseURL: api.URL, Token: qstashdev.DefaultToken, Destination: qstash.Target{URL: url}})
		if err != nil {
			t.Fatal(err)
		}
		e := testEvent(t)
		events[region] = e
		if err := pub.Publish(context.Background(), []core.Event{e}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = dev.WaitIdle(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if dlq := dev.DLQ(); len(dlq) != 0 {
			t.Fatalf("%s: refused: %d %s", region, dlq[0].ResponseStatus, dlq[0].ResponseBody)
		}
	}
	applied, _ := h.snapshot()
	for region, e := range events {
		if applied[e.ID] != 1 {
			t.Errorf("the %s event applied %d times, want 1", region, applied[e.ID])
		}
	}
}

// The region header is not signed: it only chooses among trusted keys. A
// token of one region sent under another region's name, or without a
// region when there are no default keys, is refused.
func TestReceiverRegionHeaderCannotWidenTrust(t *testing.T) {
	t.Parallel()
	regions := map[string]qstash.RegionKeys{
		"EU_CENTRAL_1": {Current: currentKey, Next: nextKey},
		"US_EAST_1":    {Current: usCurrentKey, Next: usNextKey},
	}
	rc, _ := newTestReceiver(t, &effects{}, &recordingDeduper{}, func(c *qstash.ReceiverConfig) {
		c.CurrentSigningKey, c.NextSigningKey, c.Regions = "", "", regions
	})
	e := testEvent(t)
	for _, c := range []struct {
		name, region, key string
		status            int
		reason            error
	}{
		{"US token from US", "US-EAST-1", usCurrentKey, http.StatusOK, nil},
		{"US next key from US", "us-east-1", usNextKey, http.StatusOK, nil},
		{"US token called EU", "EU-CENTRAL-1", usCurrentKey, http.StatusUnauthorized, qstash.ErrSignatureMismatch},
		{"EU token called US", "US-EAST-1", currentKey, http.StatusUnauthorized, qstash.ErrSignatureMismatch},
		{"no region, no default keys", "", currentKey, http.StatusUnauthorized, qstash.ErrUnknownRegion},
		{"unknown region", "AP-SOUTH-1", currentKey, http.StatusUnauthorized, qstash.ErrUnknownRegion},
	} {
		r := deliveryRequest(e, signed(t, c.key, e))
		if c.region != "" {
			r.Header.Set("Upstash-Region", c.region)
		}
		if w := serve(rc, r); w.Code != c.status {
			t.Errorf("%s: %d, want %d", c.name, w.Code, c.status)
		}
	}
	v, err := qstash.NewVerifier(&qstash.VerifierConfig{Regions: regions, Clock: fixedClock{testNow}})
	if err != nil {
		t.Fatal(err)
	}
	body := deliveryBody(t, e)
	if _, err := v.VerifyRegionToken(signedBody(t, currentKey, body), body, endpointURL, ""); !errors.Is(err, qstash.ErrUnknownRegion) || !errors.Is(err, qstash.ErrInvalidSignature) {
		t.Errorf("no region: %v, want ErrUnknownRegion", err)
	}
	// With default keys too, a delivery without a region uses them.
	v, err = qstash.NewVerifier(&qstash.VerifierConfig{CurrentSigningKey: currentKey, NextSigningKey: nextKey,
		Regions: map[string]qstash.RegionKeys{"US_EAST_1": {Current: usCurrentKey, Next: usNextKey}}, Clock: fixedClock{testNow}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.VerifyRegionToken(signedBody(t, currentKey, body), body, endpointURL, ""); err != nil {
		t.Errorf("default keys without a region: %v", err)
	}
	if _, err := v.VerifyRegionToken(signedBody(t, currentKey, body), body, endpointURL, "EU-CENTRAL-1"); err != nil {
		t.Errorf("default keys for a region without keys of its own: %v", err)
	}
}

func TestRegionConfigErrors(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]qstash.VerifierConfig{
		"unknown region":      {Regions: map[string]qstash.RegionKeys{"MARS_1": {Current: "sig_a", Next: "sig_b"}}},
		"empty region key":    {Regions: map[string]qstash.RegionKeys{"US_EAST_1": {Current: "sig_a"}}},
		"region twice":        {Regions: map[string]qstash.RegionKeys{"US_EAST_1": {Current: "sig_a", Next: "sig_b"}, "us-east-1": {Current: "sig_a", Next: "sig_b"}}},
		"half a default pair": {CurrentSigningKey: "sig_a", Regions: map[string]qstash.RegionKeys{"US_EAST_1": {Current: "sig_a", Next: "sig_b"}}},
		"no keys at all":      {},
	} {
		if _, err := qstash.NewVerifier(&cfg); !errors.Is(err, core.ErrInvalidConfig) {
			t.Errorf("%s: %v, want a configuration error", name, err)
		}
	}
	if got := (qstash.PublisherConfig{Region: "us-east-1"}).WithDefaults().BaseURL; got != "https://qstash-us-east-1.upstash.io" {
		t.Errorf("Region us-east-1: BaseURL %q", got)
	}
	if got := (qstash.PublisherConfig{Region: "US_EAST_1", BaseURL: "http://127.0.0.1:8080"}).WithDefaults().BaseURL; got != "http://127.0.0.1:8080" {
		t.Errorf("Region with a BaseURL: %q, want the BaseURL", got)
	}
	if _, err := qstash.NewPublisher(&qstash.PublisherConfig{Region: "moon", Token: "t"}); !errors.Is(err, core.ErrInvalidConfig) {
		t.Errorf("bad Region: %v", err)
	}
}
