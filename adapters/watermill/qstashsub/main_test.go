package qstashsub_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: every subscriber,
// qstashdev server and HTTP server a test starts is closed by it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
