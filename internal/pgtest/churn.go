package pgtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ChurnPartitions creates and drops a day partition of the outbox table
// table (unqualified, in schema) rounds times, one after the other, on
// periods far ahead (from the year 2200, never one maintenance creates),
// and reports on the channel when it is done or failed: the catalog
// churn of a retention leader dropping partitions, for tests of what
// reads the partitions meanwhile.
func ChurnPartitions(ctx context.Context, tb testing.TB, pool *pgxpool.Pool, schema, table string, rounds int) <-chan error {
	tb.Helper()
	done := make(chan error, 1)
	parent := pgx.Identifier{schema, table}.Sanitize()
	go func() {
		for i := 0; i < rounds; i++ {
			from := time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, i)
			part := pgx.Identifier{schema, fmt.Sprintf("%s_churn%d", table, i)}.Sanitize()
			if _, err := pool.Exec(ctx, `CREATE TABLE `+part+` PARTITION OF `+parent+` FOR VALUES FROM ('`+
				from.Format(time.RFC3339)+`') TO ('`+from.AddDate(0, 0, 1).Format(time.RFC3339)+`')`); err != nil {
				done <- err
				return
			}
			if _, err := pool.Exec(ctx, `DROP TABLE `+part); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	return done
}
