package qstashdev_test

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/goleak"

	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

// The harness, sink and fake clock these tests run on are in
// internal/qstashdevtest, shared with internal/interop/qstashsdk, where the
// official Go SDK drives qstashdev.

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func mustJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func listenLocal(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	return ln
}

// newTestAPI serves srv's API without closing srv at cleanup (the test
// does).
func newTestAPI(t *testing.T, srv *qstashdev.Server) *httptest.Server {
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return ts
}

func jwtParse(sig, key string) (*jwt.Token, error) {
	return jwt.Parse(sig, func(*jwt.Token) (any, error) { return []byte(key), nil }, jwt.WithValidMethods([]string{"HS256"}))
}
