package postgres

import (
	"context"
	"log/slog"
	"regexp"
	"strings"
	"testing"

	"github.com/outboxkit/outboxkit/internal/pgtest"
)

// A leader whose VACUUM keeps failing says so the first time and every
// vacuumLogEvery-th time in a row after it, not at every interval, and
// says once that it vacuums again. A VACUUM cut short by the end of the
// leader's term is no failure. The failures are real: the partitions are
// maintained through a pool that has been closed.
func TestRetentionVacuumFailuresAreLoggedSparingly(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, 2)
	closed := pgtest.Pool(t, 1)
	closed.Close()
	var log syncBuffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	// The schema need not exist: Vacuum then finds no partition and
	// succeeds, which is all the recovery below needs.
	cfg := &RetentionConfig{Schema: "vacuum_log_nowhere", Holder: "vacuum-log", Logger: logger}
	r, err := NewRetention(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	working := r.parts
	failing, err := newPartitions(closed, &PartitionsConfig{Schema: cfg.Schema, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	failed := regexp.MustCompile(`(?m)msg="retention could not vacuum the partitions[^"]*" .* failures=(\d+)$`)
	again := regexp.MustCompile(`(?m)msg="retention vacuums the partitions again" .* failures=(\d+)$`)
	lines := func(re *regexp.Regexp) string {
		var got []string
		for _, m := range re.FindAllStringSubmatch(log.String(), -1) {
			got = append(got, m[1])
		}
		return strings.Join(got, ",")
	}

	r.parts = failing
	for range 2*vacuumLogEvery + 1 {
		r.vacuum(ctx)
	}
	if got, want := lines(failed), "1,31,61"; got != want {
		t.Fatalf("61 failing VACUUMs logged failures %q, want %q:\n%s", got, want, log.String())
	}
	if got := lines(again); got != "" {
		t.Fatalf("a recovery logged before any VACUUM succeeded: %q", got)
	}

	// Cut short by the end of the term: neither logged nor counted.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	r.vacuum(cancelled)
	if got := lines(failed); got != "1,31,61" {
		t.Fatalf("a VACUUM cancelled with the term was logged as a failure: %q", got)
	}

	r.parts = working
	r.vacuum(ctx)
	r.vacuum(ctx)
	if got, want := lines(again), "61"; got != want {
		t.Fatalf("the recovery logged failures %q, want %q (once):\n%s", got, want, log.String())
	}

	// The count starts again: the next failure is logged at once.
	r.parts = failing
	r.vacuum(ctx)
	if got, want := lines(failed), "1,31,61,1"; got != want {
		t.Fatalf("after a recovery a failure logged failures %q, want %q", got, want)
	}
	if st := r.Stats(); st.Vacuums != 0 || st.VacuumedDeadRows != 0 || st.VacuumTime <= 0 {
		t.Fatalf("failed VACUUMs were counted as partitions vacuumed, or their time was not: %+v", st)
	}
}
