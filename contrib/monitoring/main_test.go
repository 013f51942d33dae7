package monitoring

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind (an
// in-process QStash, a consumer, a process reader). The ignored functions are
// idle keep-alive connections of HTTP clients the tests do not own, which
// their transports close lazily.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}
