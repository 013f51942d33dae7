package outboxwatermill_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: every Watermill,
// NATS, AMQP and QStash client a test starts is closed by it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
