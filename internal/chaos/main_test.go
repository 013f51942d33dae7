package chaos_test

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

var (
	long     = flag.Bool("long", false, "run the long chaos suite (minutes; restarts PostgreSQL): make chaos")
	duration = flag.Duration("chaos.duration", 0, "how long the long suite produces events (default 4m)")
	seed     = flag.Int64("chaos.seed", 0, "seed of the fault schedule (default: random, printed)")
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	cleanupBinaries()
	if code == 0 {
		// Everything in process (qstashdev, the transport proxy, pools,
		// process waiters) must be gone once the tests end.
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
