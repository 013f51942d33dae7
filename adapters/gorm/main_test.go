package outboxgorm_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: every *gorm.DB
// a test opens is closed by it. GORM's prepared-statement cache starts a
// goroutine that nothing stops (gorm.io/gorm/internal/lru says so: "done
// channel is never closed"), one per *gorm.DB opened with PrepareStmt.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("gorm.io/gorm/internal/lru.NewLRU[...].func1"))
}
