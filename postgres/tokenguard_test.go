package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
	"github.com/outboxkit/outboxkit/qstash"
)

var _ qstash.ReplayGuard = (*postgres.TokenGuard)(nil)

func newTokenGuard(t *testing.T) (*postgres.TokenGuard, string) {
	t.Helper()
	pool := pgtest.Pool(t, 4)
	schema := pgtest.Schema(t, pool, "pgtokens")
	g, err := postgres.NewTokenGuard(pool, &postgres.TokenGuardConfig{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // idempotent
		if err := g.CreateTable(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	return g, schema
}

// TestTokenGuardAcceptsEachTokenOnce: a token ID is a first use once until
// it expires; instances sharing the table agree, concurrent presentations
// included; an expired ID may be recorded again.
func TestTokenGuardAcceptsEachTokenOnce(t *testing.T) {
	t.Parallel()
	g, _ := newTokenGuard(t)
	ctx := ctxT(t)
	live := time.Now().Add(5 * time.Minute)
	if first, err := g.FirstUse(ctx, "jwt_a", live); !first || err != nil {
		t.Fatalf("FirstUse(jwt_a) = %v, %v; want true", first, err)
	}
	if first, err := g.FirstUse(ctx, "jwt_a", live); first || err != nil {
		t.Fatalf("FirstUse(jwt_a) again = %v, %v; want false", first, err)
	}

	var wg sync.WaitGroup
	var mu sync.Mutex
	firsts := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first, err := g.FirstUse(ctx, "jwt_concurrent", live)
			if err != nil {
				t.Error(err)
			}
			if first {
				mu.Lock()
				firsts++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firsts != 1 {
		t.Fatalf("%d first uses of one token among concurrent calls, want 1", firsts)
	}

	past := time.Now().Add(-time.Minute)
	if first, err := g.FirstUse(ctx, "jwt_old", past); !first || err != nil {
		t.Fatalf("FirstUse(jwt_old) = %v, %v", first, err)
	}
	if first, err := g.FirstUse(ctx, "jwt_old", live); !first || err != nil {
		t.Fatalf("FirstUse(jwt_old) after it expired = %v, %v; want true", first, err)
	}
}

// TestTokenGuardForgetsExpiredTokens: every FirstUse deletes a few expired
// tokens, so the table holds the live tokens plus a draining remainder, not
// every token ever seen.
func TestTokenGuardForgetsExpiredTokens(t *testing.T) {
	t.Parallel()
	g, schema := newTokenGuard(t)
	ctx := ctxT(t)
	pool := pgtest.Pool(t, 1)
	past := time.Now().Add(-time.Minute)
	for i := range 40 {
		if _, err := g.FirstUse(ctx, "jwt_expired_"+strconv.Itoa(i), past); err != nil {
			t.Fatal(err)
		}
	}
	count := func() int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.`+postgres.DefaultTokenTable).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := count()
	if before >= 40 {
		t.Fatalf("%d rows after 40 expired tokens: inserting must prune expired ones", before)
	}
	for i := range 10 {
		if _, err := g.FirstUse(ctx, "jwt_live_"+strconv.Itoa(i), time.Now().Add(5*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(); n != 10 {
		t.Fatalf("%d rows, want the 10 live tokens only", n)
	}
}

// TestTokenGuardSharedByReceivers: two Receivers (two instances of one
// consumer) on one TokenGuard: a delivery replayed to the other instance is
// refused.
func TestTokenGuardSharedByReceivers(t *testing.T) {
	t.Parallel()
	g, _ := newTokenGuard(t)
	const url = "https://billing.example.com/qstash/orders"
	const key = "sig_7kYjw48mhY7kAjqNGcy6cr29RJ6r"
	newReceiver := func() *qstash.Receiver {
		rc, err := qstash.NewReceiver(&qstash.ReceiverConfig{
			CurrentSigningKey: key, NextSigningKey: "sig_5ZB6DVzB1wjE8S6rZ7eenA8Pdnhs", URL: url,
			Handler: core.HandlerFunc(func(context.Context, core.Event) error { return nil }),
			Deduper: memoryDeduper{}, Consumer: "billing", ReplayGuard: g,
		})
		if err != nil {
			t.Fatal(err)
		}
		return rc
	}
	a, b := newReceiver(), newReceiver()
	e := mustEvent(t, "order.confirmed", map[string]string{"order": "o-1"})
	body, err := qstash.EncodeStructuredEvent(e)
	if err != nil {
		t.Fatal(err)
	}
	token, err := qstash.Signer{Key: key}.Sign(body, url)
	if err != nil {
		t.Fatal(err)
	}
	deliver := func(rc *qstash.Receiver) int {
		req := httptest.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Content-Type", qstash.ContentTypeStructured)
		req.Header.Set("Upstash-Signature", token)
		w := httptest.NewRecorder()
		rc.ServeHTTP(w, req)
		return w.Code
	}
	if code := deliver(a); code != http.StatusOK {
		t.Fatalf("instance a: %d, want 200", code)
	}
	if code := deliver(b); code != http.StatusUnauthorized {
		t.Fatalf("replay to instance b: %d, want 401", code)
	}
}

// memoryDeduper applies every effect: the deduper is not under test here.
type memoryDeduper struct{}

func (memoryDeduper) Once(ctx context.Context, _ core.DedupeKey, effect func(context.Context) error) (bool, error) {
	return true, effect(ctx)
}

func TestNewTokenGuardValidates(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, 1)
	for _, cfg := range []*postgres.TokenGuardConfig{
		{Schema: "bad-schema"}, {Table: "tokens; DROP TABLE x"}, {Table: "t23456789012345678901234567890123456789012345678901234567890"},
	} {
		if _, err := postgres.NewTokenGuard(pool, cfg); err == nil {
			t.Errorf("NewTokenGuard(%+v) accepted", cfg)
		}
	}
	if _, err := postgres.NewTokenGuard(nil, nil); !errors.Is(err, core.ErrInvalidConfig) {
		t.Errorf("NewTokenGuard(nil) = %v, want a ConfigError", err)
	}
}
