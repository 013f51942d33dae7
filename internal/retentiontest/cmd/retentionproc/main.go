// Command retentionproc runs one postgres.Retention until it is
// interrupted or killed: the process postgres's retention tests SIGKILL
// to see another Retention take the lease over. It prints a JSON line of
// the Retention's stats on stdout whenever they change.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/outboxkit/outboxkit/postgres"
)

// report is the line printed on stdout.
type report struct {
	Leader           bool  `json:"leader"`
	Passes           int64 `json:"passes"`
	PublishedDeleted int64 `json:"published_deleted"`
	ProcessedDeleted int64 `json:"processed_deleted"`
}

func main() {
	var (
		url      = flag.String("database-url", "", "PostgreSQL connection string")
		schema   = flag.String("schema", "", "schema of the outbox table")
		table    = flag.String("table", "", "outbox table")
		holder   = flag.String("holder", "", "holder name in the lease row")
		lease    = flag.Duration("lease", 0, "lease duration")
		interval = flag.Duration("interval", 0, "time between passes")
	)
	flag.Parse()
	if err := run(*url, postgres.RetentionConfig{Schema: *schema, Table: *table, Holder: *holder, LeaseDuration: *lease, Interval: *interval}); err != nil {
		fmt.Fprintln(os.Stderr, "retentionproc:", err)
		os.Exit(1)
	}
}

func run(url string, cfg postgres.RetentionConfig) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	pool, err := postgres.NewPool(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	r, err := postgres.NewRetention(pool, &cfg)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var last report
	enc := json.NewEncoder(os.Stdout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
		}
		st := r.Stats()
		cur := report{Leader: st.Leader, Passes: st.Passes, PublishedDeleted: st.PublishedDeleted, ProcessedDeleted: st.ProcessedDeleted}
		if cur != last {
			if err := enc.Encode(cur); err != nil {
				return err
			}
			last = cur
		}
	}
}
