package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// accountRows is the size of the business table the write workload
// updates: large enough that 8 writers rarely touch the same row.
const accountRows = 100_000

// writeCase names one write measurement.
type writeCase struct {
	name   string // table row
	system string // "pgbench" or "outboxkit"
	// pgbench: the transaction script (after the \set line); outboxkit:
	// event says whether to Add an event, notify how the wake-up is sent.
	script string
	event  bool
	notify postgres.NotifyMode
	// interval is the store's NotifyInterval (0: its default).
	interval time.Duration
	// driver, when set, runs the case's writers on a *sql.Tx of this
	// database/sql driver (databasesql.go).
	driver string

	// insert marks the cases whose business statement is an INSERT of an
	// order, compared with the hand-written outbox INSERT (write_insert.go);
	// outbox says who writes the event, consume whether the system's
	// consumer (outboxkit's relay, River's workers) runs meanwhile, and
	// river is River's configuration.
	insert  bool
	outbox  eventWriter
	consume bool
	river   riverSetup
}

// writeResult is one write measurement.
type writeResult struct {
	tps      float64 // business transactions committed per second
	consumed float64 // events the consumer handled per second (0: none ran)
	// µs of CPU per transaction of this process and of the writers'
	// PostgreSQL backends (the Go UPDATE cases; 0 elsewhere)
	procCPU, dbCPU float64
}

const (
	caseAlone      = "UPDATE alone"
	caseEvent      = "UPDATE + event"
	caseInTxNotify = "UPDATE + event, NOTIFY in transaction"
	caseNotify     = "UPDATE + event + NOTIFY"
	caseAfter      = "UPDATE + event, NotifyAfterCommit"
	caseUnpaced    = "UPDATE + event, NotifyAfterCommit unpaced"
)

// writeCases returns the measurements of one repetition: each business
// transaction run by pgbench and by the Go client through outboxkit.
func (b *bench) writeCases(s *schema, channel string) []writeCase {
	accounts := s.table("accounts")
	outbox := s.table(postgres.DefaultTable)
	update := `UPDATE ` + accounts + ` SET balance = balance + 1 WHERE id = :aid;`
	insert := `INSERT INTO ` + outbox + ` (id, event_type, payload) VALUES (gen_random_uuid(), 'bench', '` + benchPayload + `')`
	cases := []writeCase{
		{name: caseAlone, system: "pgbench", script: "BEGIN;\n" + update + "\nEND;\n"},
		{name: caseAlone, system: "outboxkit"},
		{name: caseEvent, system: "pgbench", script: "BEGIN;\n" + update + "\n" + insert + ";\nEND;\n"},
		// The store's default: writers send no wake-up (NotifyNone).
		{name: caseEvent, system: "outboxkit", event: true, notify: postgres.NotifyNone},
		// The wake-up after COMMIT (Store.Notify), compared with pgbench's
		// UPDATE + INSERT.
		{name: caseAfter, system: "outboxkit", event: true, notify: postgres.NotifyAfterCommit},
	}
	if b.o.extras {
		// NOTIFY in Add's statement (NotifyInTransaction, the default before
		// WAL wake-ups) and the same NOTIFY from pgbench show what it costs
		// on each side; the third case what pacing the after-commit
		// notifications (Config.NotifyInterval) saves.
		cases = append(cases,
			writeCase{name: caseInTxNotify, system: "outboxkit", event: true, notify: postgres.NotifyInTransaction},
			writeCase{name: caseNotify, system: "pgbench", script: "BEGIN;\n" + update + "\nWITH ins AS (" + insert + ") SELECT pg_notify('" + channel + "', '');\nEND;\n"},
			writeCase{name: caseUnpaced, system: "outboxkit", event: true, notify: postgres.NotifyAfterCommit, interval: -1},
		)
	}
	cases = append(cases, b.sqlWriteCases()...)
	return append(cases, b.insertCases()...)
}

// writeSchemas are the schemas of one repetition of the write workload:
// outboxkit's tables and the business tables in main, the seed article's
// outbox table in article, and River's tables in river (nil without
// -river).
type writeSchemas struct {
	main, article, river *schema
}

// writeSchema creates the outbox, the business tables, the article's
// outbox and River's schema.
func (b *bench) writeSchema(ctx context.Context) (*writeSchemas, error) {
	s, err := b.outboxSchema(ctx)
	if err != nil {
		return nil, err
	}
	ws := &writeSchemas{main: s}
	_, err = b.admin.Exec(ctx, `CREATE TABLE `+s.table("accounts")+` (id integer PRIMARY KEY, balance bigint NOT NULL DEFAULT 0);
INSERT INTO `+s.table("accounts")+` (id) SELECT generate_series(1, `+strconv.Itoa(accountRows)+`);
`+ordersDDL(s))
	if err == nil {
		_, err = b.admin.Exec(ctx, `VACUUM ANALYZE `+s.table("accounts"))
	}
	if err != nil {
		_ = ws.drop()
		return nil, fmt.Errorf("create business tables: %w", err)
	}
	if ws.article, err = b.articleSchema(ctx); err != nil {
		_ = ws.drop()
		return nil, err
	}
	if b.o.river {
		if ws.river, err = b.riverSchema(ctx); err != nil {
			_ = ws.drop()
			return nil, err
		}
	}
	return ws, nil
}

// drop drops every schema of ws.
func (ws *writeSchemas) drop() error {
	var first error
	for _, s := range []*schema{ws.main, ws.article, ws.river} {
		if s != nil {
			if err := s.drop(); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// resetWrite empties the outboxes, the job table and the orders, vacuums
// the tables and checkpoints, so every measurement starts from the same
// state: the same table sizes and no dirty pages that the previous one
// left to flush.
func resetWrite(ctx context.Context, ws *writeSchemas) error {
	s := ws.main
	tables := []string{s.table(postgres.DefaultTable), s.table("orders"), ws.article.table(articleTable)}
	if ws.river != nil {
		tables = append(tables, ws.river.table("river_job"))
	}
	qs := []string{`TRUNCATE ` + strings.Join(tables, ", "), `VACUUM ANALYZE ` + s.table("accounts")}
	for _, t := range tables {
		qs = append(qs, `VACUUM ANALYZE `+t)
	}
	for _, q := range append(qs, `CHECKPOINT`) {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// writeGo runs writers goroutines for d, each committing business
// transactions (UPDATE one random account, and with event an outbox event
// through postgres.Store.Add) back to back. It returns transactions per
// second and the CPU each cost.
func (b *bench) writeGo(ctx context.Context, s *schema, c writeCase, profile string) (writeResult, error) {
	pool, err := newPool(ctx, b.o.dsn, int32(b.o.writers))
	if err != nil {
		return writeResult{}, err
	}
	defer pool.Close()
	store, err := postgres.New(pool, &postgres.Config{Schema: s.name, Notify: c.notify, NotifyInterval: c.interval})
	if err != nil {
		return writeResult{}, err
	}
	meter, err := newCPUMeter(ctx, pool)
	if err != nil {
		return writeResult{}, err
	}
	update := `UPDATE ` + s.table("accounts") + ` SET balance = balance + 1 WHERE id = $1`
	payload := []byte(benchPayload)
	tx1 := func(ctx context.Context, rng *rand.Rand) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
		if _, err := tx.Exec(ctx, update, rng.IntN(accountRows)+1); err != nil {
			return err
		}
		if c.event {
			if err := store.Add(ctx, tx, core.Event{ID: core.NewID(), Type: "bench", Payload: payload}); err != nil {
				return err
			}
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		store.Notify() // a no-op unless NotifyAfterCommit
		return nil
	}
	return meteredLoop(ctx, b.o.writers, b.o.writeFor, meter, profile, tx1)
}

// meteredLoop is closedLoop measured: transactions per second, and the
// CPU per transaction of this process and of meter's backends.
func meteredLoop(ctx context.Context, workers int, d time.Duration, meter *cpuMeter, profile string, fn func(context.Context, *rand.Rand) error) (writeResult, error) {
	stopProf := startProfile(profile)
	start := time.Now()
	tps, err := closedLoop(ctx, workers, d, fn)
	elapsed := time.Since(start)
	procCPU, dbCPU := meter.stop()
	stopProf()
	if err != nil {
		return writeResult{}, err
	}
	n := int(tps * elapsed.Seconds())
	return writeResult{tps: tps, procCPU: perEvent(procCPU, n), dbCPU: perEvent(dbCPU, n)}, nil
}

// closedLoop runs fn back to back from workers goroutines for d and returns
// calls per second.
func closedLoop(ctx context.Context, workers int, d time.Duration, fn func(context.Context, *rand.Rand) error) (float64, error) {
	var done atomic.Int64
	var errs onceErr
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, seed))
			for time.Now().Before(deadline) && ctx.Err() == nil && errs.get() == nil {
				if err := fn(ctx, rng); err != nil {
					errs.set(err)
					return
				}
				done.Add(1)
			}
		}(uint64(w + 1))
	}
	wg.Wait()
	if err := errs.get(); err != nil {
		return 0, err
	}
	return float64(done.Load()) / time.Since(start).Seconds(), ctx.Err()
}

var tpsLine = regexp.MustCompile(`(?m)^tps = ([0-9.]+)`)

// pgbenchPath finds pgbench on PATH or in Debian's PostgreSQL directories.
func pgbenchPath() (string, error) {
	if p, err := exec.LookPath("pgbench"); err == nil {
		return p, nil
	}
	if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pgbench"); len(m) > 0 {
		return m[len(m)-1], nil
	}
	return "", fmt.Errorf("pgbench not found: install the PostgreSQL client package (Debian: postgresql-client) or leave out -workloads write")
}

// pgbenchArgs returns the command line, and environment, that runs script
// like the Go writers: `pgbench -n -c <writers> -T <seconds> -f script`.
func (b *bench) pgbenchArgs(script string) ([]string, []string, error) {
	cfg, err := pgx.ParseConfig(b.o.dsn)
	if err != nil {
		return nil, nil, err
	}
	args := []string{"-n", "-c", strconv.Itoa(b.o.writers), "-T", strconv.Itoa(int(b.o.writeFor.Round(time.Second) / time.Second)),
		"-f", script, "-h", cfg.Host, "-p", strconv.Itoa(int(cfg.Port)), "-U", cfg.User, cfg.Database}
	env := os.Environ()
	if cfg.Password != "" {
		env = append(env, "PGPASSWORD="+cfg.Password)
	}
	// libpq prefers TLS when the server offers it; the Go client here
	// follows the DSN, so pgbench must too, or it would pay for encryption
	// the Go client does not.
	if cfg.TLSConfig == nil {
		env = append(env, "PGSSLMODE=disable")
	} else {
		env = append(env, "PGSSLMODE=require")
	}
	return args, env, nil
}

// writePgbench runs one pgbench measurement and returns its tps.
func (b *bench) writePgbench(ctx context.Context, c writeCase, dir string) (float64, error) {
	bin, err := pgbenchPath()
	if err != nil {
		return 0, err
	}
	script := filepath.Join(dir, "script.sql")
	body := fmt.Sprintf("\\set aid random(1, %d)\n%s", accountRows, c.script)
	if err := os.WriteFile(script, []byte(body), 0o600); err != nil {
		return 0, err
	}
	args, env, err := b.pgbenchArgs(script)
	if err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("pgbench %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	m := tpsLine.FindSubmatch(out.Bytes())
	if m == nil {
		return 0, fmt.Errorf("pgbench printed no tps line:\n%s", out.String())
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

// pgbenchCommand is the command line to quote in the report.
func (b *bench) pgbenchCommand() string {
	args, _, err := b.pgbenchArgs("script.sql")
	if err != nil {
		return ""
	}
	return "pgbench " + strings.Join(args, " ")
}
