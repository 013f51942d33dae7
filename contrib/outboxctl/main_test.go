package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// binary is the outboxctl executable TestMain builds once; the CLI tests run
// it as a real process, as operators and probes do, so exit codes, signals
// and output streams are tested for what they are.
var binary string

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "outboxctl-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "outboxctl tests:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "outboxctl")
	args := []string{"build", "-o", binary}
	if raceEnabled {
		// The binary runs the relay's goroutines: race-check them too.
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, ".")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "outboxctl tests: go build:", err)
		return 1
	}
	code := m.Run()
	if code == 0 {
		// The in-process servers (qstashdev, consumers) must be gone. The
		// ignored functions are idle keep-alive connections of HTTP clients
		// we do not own, which their transports close lazily.
		if err := goleak.Find(
			goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "outboxctl tests: leaked goroutines:", err)
			return 1
		}
	}
	return code
}
