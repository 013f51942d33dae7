package outboxkafka_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: every kgo
// client, kfake cluster, relay and pool a test starts is closed by it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
