package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

const pruneHelp = `Deletes events published longer ago than --older-than, oldest first, in
statements of at most --batch-size rows so it never holds many locks or
writes a long burst of WAL. Pending and dead-lettered events are never
pruned. Run it from cron; it is safe beside running relays.

With --processed it also deletes consumers' processed-event records (the
deduplication table, <table>_processed) older than --processed-older-than.
Keep those records at least as long as published events (a replay of an
event whose record is gone applies its effect again) and longer than the
transport redelivers (QStash retries for days).

Ages are measured with the database's clock.

On the partitioned layout (migrate --partitions) prune first does what the
relays' retention leader does: it drops the partitions whose period ended
before the cutoff and that hold nothing to keep (no pending event, none
published since), moving their dead letters to the default partition with
their IDs, and creates the partitions of the periods ahead that are
missing. Then it deletes in batches what is left, as on the plain layout.
Processed-record partitions are dropped only with --processed.

--older-than 0s (or --processed-older-than 0s) means every published event
(or processed record), including one published this instant, which could
then be neither inspected nor replayed. It needs --yes; --dry-run does not.`

func (a *app) cmdPrune(ctx context.Context, args []string) error {
	fs := a.newFlagSet("prune", "--older-than DURATION [--processed [--processed-older-than DURATION]] [--dry-run] [--yes]", pruneHelp)
	a.registerGlobals(fs)
	var olderThan, processedOlderThan time.Duration
	newDurationFlag(fs, &olderThan, "older-than", 0, "delete events published longer ago than this (e.g. 7d, 36h); required")
	batch := fs.Int("batch-size", 1000, "most rows deleted per statement")
	processed := fs.Bool("processed", false, "also prune the deduplication table's processed-event records")
	newDurationFlag(fs, &processedOlderThan, "processed-older-than", 0, "age beyond which processed-event records are deleted (defaults to --older-than)")
	dryRun := fs.Bool("dry-run", false, "count the published events that would be deleted, delete nothing")
	yes := fs.Bool("yes", false, "confirm an age of 0s: delete every published event (or processed record)")
	if err := a.parseFlags(fs, args); err != nil {
		return err
	}
	// A zero age is a value, not an absent flag: the flag set knows which.
	if !flagGiven(fs, "older-than") {
		return usageError("prune needs --older-than DURATION (e.g. --older-than 7d): how long to keep published events")
	}
	if *batch < 1 {
		return usageError("--batch-size must be at least 1")
	}
	if !flagGiven(fs, "processed-older-than") {
		processedOlderThan = olderThan
	} else if !*processed {
		return usageError("--processed-older-than only applies with --processed")
	}
	if olderThan == 0 && !*yes && !*dryRun {
		return usageError("--older-than 0s deletes every published event, including any published this instant, which could then be neither inspected nor replayed: add --yes to do that, or give a longer age such as 7d (--dry-run counts them)")
	}
	if *processed && processedOlderThan == 0 && !*yes && !*dryRun {
		return usageError("--processed-older-than 0s deletes every processed-event record, so consumers would apply a redelivered event again: add --yes to do that, or give a longer age such as 30d")
	}
	if *processed && processedOlderThan < olderThan {
		a.warn("--processed-older-than %s is shorter than --older-than %s: replaying a published event whose processed record is gone applies its effect again",
			formatDuration(processedOlderThan), formatDuration(olderThan))
	}

	pool, store, err := a.openStore(ctx, 0, postgres.Config{})
	if err != nil {
		return err
	}
	defer pool.Close()
	var now time.Time
	if err := pool.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		return a.dbError(err)
	}
	cutoff := now.Add(-olderThan)
	var pcut time.Time
	if *processed {
		pcut = now.Add(-processedOlderThan)
	}

	if *dryRun {
		n, err := a.countPublishedBefore(ctx, pool, cutoff)
		if err != nil {
			return err
		}
		due, partitioned, err := a.duePartitions(ctx, pool, cutoff)
		if err != nil {
			return err
		}
		if partitioned {
			fmt.Fprintf(a.stdout, "would drop the %d partition(s) whose period ended before %s that hold nothing to keep (dead letters moved out first)%s\n",
				len(due), rfc3339(cutoff), listSuffix(due))
		}
		fmt.Fprintf(a.stdout, "would prune %d event(s) published before %s (older than %s)\n", n, rfc3339(cutoff), formatDuration(olderThan))
		return nil
	}

	// On the partitioned layout, retired partitions are dropped first:
	// what they held needs no delete.
	partitioned, err := a.maintainPartitions(ctx, pool, cutoff, pcut)
	if err != nil {
		return err
	}

	var total int64
	if a.terminal {
		// Counting first gives the bar its end; only worth its cost when
		// someone watches.
		if total, err = a.countPublishedBefore(ctx, pool, cutoff); err != nil {
			return err
		}
	}
	p := a.startProgress("pruning", "events", total)
	n, err := store.Prune(ctx, core.PruneRequest{PublishedBefore: cutoff, BatchSize: *batch, Progress: p.set})
	p.done()
	if err != nil {
		return fmt.Errorf("pruned %d event(s), then: %w", n, a.dbError(err))
	}
	more := ""
	if partitioned {
		more = " in batches, beside the dropped partitions"
	}
	fmt.Fprintf(a.stdout, "pruned %d event(s) published before %s (older than %s)%s\n", n, rfc3339(cutoff), formatDuration(olderThan), more)

	if *processed {
		d, err := postgres.NewDeduper(pool, &postgres.DeduperConfig{Schema: a.g.schema, Table: a.g.table, PruneBatchSize: *batch})
		if err != nil {
			return a.dbError(err)
		}
		p := a.startProgress("pruning processed records", "records", 0)
		n, err := d.Prune(ctx, pcut)
		p.done()
		if err != nil {
			return fmt.Errorf("pruned %d processed-event record(s), then: %w", n, a.dbError(err))
		}
		fmt.Fprintf(a.stdout, "pruned %d processed-event record(s) recorded before %s (older than %s)\n", n, rfc3339(pcut), formatDuration(processedOlderThan))
	}
	return nil
}

// countPublishedBefore counts what Prune would delete. The outbox table's
// columns are its public contract, so this reads them directly; the store
// offers no count.
func (a *app) countPublishedBefore(ctx context.Context, pool *pgxpool.Pool, cutoff time.Time) (int64, error) {
	var n int64
	table := pgx.Identifier{a.g.schema, a.g.table}.Sanitize()
	err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE published_at < $1", cutoff).Scan(&n)
	if err != nil {
		return 0, a.dbError(err)
	}
	return n, nil
}

// listSuffix is ": a, b" for a non-empty list.
func listSuffix(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return ": " + strings.Join(names, ", ")
}
