package monitoring

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "outboxkit-monitoring-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "contrib/monitoring tests:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = dir
	code := m.Run()
	if code == 0 {
		// The in-process QStash, the consumer and the process readers must
		// be gone. The ignored functions are idle keep-alive connections of
		// HTTP clients the tests do not own, which their transports close
		// lazily.
		if err := goleak.Find(
			goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "contrib/monitoring tests: leaked goroutines:", err)
			return 1
		}
	}
	return code
}
