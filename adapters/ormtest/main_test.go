package ormtest_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: every handle a
// test opens is closed by it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
