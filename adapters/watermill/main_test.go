package outboxwatermill_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind.
//
// The ignored functions are goroutines of third-party clients that outlive
// a test by design and are not ours to stop:
//   - net/http's persistConn loops: idle keep-alive connections of the HTTP
//     clients qstashdev and the qstash publisher use, closed lazily by the
//     transport (qstashdev closes its own; a client we do not own may keep
//     one idle until its timeout).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}
