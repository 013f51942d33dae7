package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/nats-io/nats.go"

	outboxkafka "github.com/outboxkit/outboxkit/adapters/kafka"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/kafkatest"
	"github.com/outboxkit/outboxkit/postgres"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

// The capacity mode's measurements (docs/SCALING.md explains what each one
// feeds in the model). Every one runs in a schema of its own, on connections
// opened before it starts, and reports CPU time, WAL bytes and round trips
// per event with the load average at its start.

// capHistory is the published rows a measurement's outbox holds before it
// starts: an outbox with a history, as in production, whose planner
// statistics (ANALYZE) show a table of some size, and whose rows are
// numbered past the store's young-table threshold (postgres/plans.go), so
// the relay's statements are prepared after its first claim. An empty
// new table instead runs them planned per execution, which costs a claim
// a third more; and numbering a new table's rows past the threshold
// without the history would have them prepared while the table is tiny,
// with generic plans that scan it whole.
func (c *capRun) capHistory() int {
	if c.o.short {
		return 5000
	}
	return 20_000
}

// capSchema creates an outbox schema with history published rows in it
// (written, available and published a millisecond apart each, as a relay
// that kept up leaves them), then ANALYZEs it.
func (c *capRun) capSchema(ctx context.Context, history int) (*schema, error) {
	return c.capSchemaLayout(ctx, history, postgres.PartitionNone)
}

// capSchemaLayout is capSchema with the outbox in layout.
func (c *capRun) capSchemaLayout(ctx context.Context, history int, layout postgres.Partitioning) (*schema, error) {
	s, err := createSchema(ctx, c.admin)
	if err != nil {
		return nil, err
	}
	c.schemas = append(c.schemas, s.name)
	if err := postgres.Migrate(ctx, c.admin, &postgres.MigrateConfig{Schema: s.name, Partitions: layout}); err != nil {
		_ = s.drop()
		return nil, fmt.Errorf("migrate %s: %w", s.name, err)
	}
	if err := c.history(ctx, s, postgres.DefaultTable, history); err != nil {
		_ = s.drop()
		return nil, err
	}
	return s, nil
}

// history writes n published rows into an outbox table and ANALYZEs it.
func (c *capRun) history(ctx context.Context, s *schema, table string, n int) error {
	t := s.table(table)
	if n > 0 {
		if _, err := c.admin.Exec(ctx, `INSERT INTO `+t+` (id, event_type, payload, created_at, available_at, published_at, attempts)
SELECT `+uuidV7+`, 'bench', `+growthPayload+`, ts, ts, ts + interval '1 millisecond', 1
FROM (SELECT now() - ($1::int - g) * interval '1 millisecond' AS ts FROM generate_series(1, $1::int) g) h`, n); err != nil {
			return fmt.Errorf("the history of %s: %w", table, err)
		}
	}
	if _, err := c.admin.Exec(ctx, `ANALYZE `+t); err != nil {
		return err
	}
	return nil
}

// capPreload writes n pending events by COPY in transactions of
// preloadChunk rows and ANALYZEs the table. Unlike the drain workload's
// preload it takes no CHECKPOINT and no VACUUM: the rows are then as
// fresh as a relay finds them in production (written since the last
// checkpoint, so the relay's updates take no full-page images; not yet
// all-visible), which is the state whose WAL the model needs.
func capPreload(ctx context.Context, s *schema, n int) error {
	payload := []byte(benchPayload)
	for start := 0; start < n; start += preloadChunk {
		end := min(start+preloadChunk, n)
		_, err := s.pool.CopyFrom(ctx, pgx.Identifier{s.name, postgres.DefaultTable}, []string{"id", "event_type", "payload"},
			pgx.CopyFromFunc(func() func() ([]any, error) {
				i := start
				return func() ([]any, error) {
					if i == end {
						return nil, nil
					}
					i++
					return []any{pgtype.UUID{Bytes: core.NewID(), Valid: true}, "bench", payload}, nil
				}
			}()))
		if err != nil {
			return fmt.Errorf("preload outbox: %w", err)
		}
	}
	_, err := s.pool.Exec(ctx, "ANALYZE "+s.table(postgres.DefaultTable))
	return err
}

// appName names a measurement's connections.
func appName(kind string, s *schema) string { return "outboxkit-capacity-" + kind + "-" + s.name }

// --- writers ---

// CapWrite is one writer measurement: writers committing business
// transactions (one UPDATE of a random account) with EventsPerTx events
// added through Store.Add, back to back.
type CapWrite struct {
	Case string `json:"case"`
	// Layout is the outbox table's: plain, hourly or daily partitions.
	Layout      string  `json:"layout,omitempty"`
	EventsPerTx int     `json:"events_per_tx"`
	Notify      string  `json:"notify"`
	Writers     int     `json:"writers"`
	Tx          int64   `json:"transactions"`
	Seconds     float64 `json:"seconds"`
	PGPerTx     float64 `json:"pg_cpu_us_per_tx"`
	GoPerTx     float64 `json:"go_cpu_us_per_tx"`
	TurnsPerTx  float64 `json:"round_trips_per_tx"`
	// WAL per transaction: the outbox table's records, the business
	// table's, and the commit records.
	WALOutboxPerTx float64 `json:"wal_outbox_bytes_per_tx"`
	WALOtherPerTx  float64 `json:"wal_business_bytes_per_tx"`
	WALCommitPerTx float64 `json:"wal_commit_bytes_per_tx"`
	WALFPIPerTx    float64 `json:"wal_fpi_bytes_per_tx"`
	Load           string  `json:"load"`
	Rep            int     `json:"rep"`
}

// writeCase is one writer measurement's settings.
type capWriteCase struct {
	name   string
	events int
	notify postgres.NotifyMode
}

func (c *capRun) writeCases() []capWriteCase {
	cases := []capWriteCase{{"business transaction alone", 0, postgres.NotifyNone}, {"+ 1 event (Add)", 1, postgres.NotifyNone}}
	if !c.o.short {
		cases = append(cases, capWriteCase{"+ 10 events (one Add)", 10, postgres.NotifyNone},
			capWriteCase{"+ 1 event, NotifyAfterCommit", 1, postgres.NotifyAfterCommit})
	}
	return cases
}

func notifyName(m postgres.NotifyMode) string {
	switch m {
	case postgres.NotifyAfterCommit:
		return "NotifyAfterCommit"
	case postgres.NotifyInTransaction:
		return "NotifyInTransaction"
	case postgres.NotifyOff:
		return "NotifyOff"
	}
	return "NotifyNone"
}

// measureWrites runs the writer cases once, in rotated order; on a
// partitioned layout only the case with one event (the business
// transaction alone does not depend on the outbox's layout).
func (c *capRun) measureWrites(ctx context.Context, rep int, layout postgres.Partitioning) error {
	s, err := c.capSchemaLayout(ctx, c.capHistory(), layout)
	if err != nil {
		return err
	}
	defer s.drop()
	if _, err := c.admin.Exec(ctx, `CREATE TABLE `+s.table("accounts")+` (id integer PRIMARY KEY, balance bigint NOT NULL DEFAULT 0);
INSERT INTO `+s.table("accounts")+` (id) SELECT generate_series(1, `+strconv.Itoa(accountRows)+`)`); err != nil {
		return fmt.Errorf("business table: %w", err)
	}
	if _, err := c.admin.Exec(ctx, `VACUUM ANALYZE `+s.table("accounts")); err != nil {
		return fmt.Errorf("business table: %w", err)
	}
	cases := c.writeCases()
	if layout != postgres.PartitionNone {
		cases = []capWriteCase{{"+ 1 event (Add)", 1, postgres.NotifyNone}}
	}
	for _, wc := range rotate(cases, rep) {
		res, err := c.writeOnce(ctx, s, wc)
		if err != nil {
			return fmt.Errorf("writers %s: %w", wc.name, err)
		}
		res.Rep, res.Layout = rep+1, layoutName(layout)
		c.logf("write %s rep %d: %.0f tx/s, PG %.1f µs/tx, WAL outbox %.0f B/tx, %.2f round trips/tx (load %s)",
			wc.name, rep+1, float64(res.Tx)/res.Seconds, res.PGPerTx, res.WALOutboxPerTx, res.TurnsPerTx, res.Load)
		c.rep.Write = append(c.rep.Write, res)
	}
	return nil
}

func (c *capRun) writeOnce(ctx context.Context, s *schema, wc capWriteCase) (CapWrite, error) {
	if _, err := c.admin.Exec(ctx, `TRUNCATE `+s.table(postgres.DefaultTable)); err != nil {
		return CapWrite{}, err
	}
	if _, err := c.admin.Exec(ctx, `VACUUM ANALYZE `+s.table(postgres.DefaultTable)+`, `+s.table("accounts")); err != nil {
		return CapWrite{}, err
	}
	app := appName("writer", s)
	pool, err := newCapPool(ctx, c.o.dsn, int32(c.o.capWriters), app)
	if err != nil {
		return CapWrite{}, err
	}
	defer pool.Close()
	c.noteLocal(pool)
	store, err := postgres.New(pool.Pool, &postgres.Config{Schema: s.name, Notify: wc.notify})
	if err != nil {
		return CapWrite{}, err
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
		if wc.events > 0 {
			evs := make([]core.Event, wc.events)
			for i := range evs {
				evs[i] = core.Event{ID: core.NewID(), Type: "bench", Payload: payload}
			}
			if err := store.Add(ctx, tx, evs...); err != nil {
				return err
			}
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		store.Notify() // a no-op unless NotifyAfterCommit
		return nil
	}
	load := loadSnapshot()
	meter, err := newBackendMeter(ctx, c.admin, app)
	if err != nil {
		return CapWrite{}, err
	}
	lsn, err := c.wal.mark(ctx)
	if err != nil {
		return CapWrite{}, err
	}
	server := newServerCPU(ctx, c.admin)
	rtt0, cpu0, start := pool.rtt.turns.Load(), cpuTime(), time.Now()
	var done atomic.Int64
	_, err = closedLoop(ctx, c.o.capWriters, c.o.capWriteFor, func(ctx context.Context, rng *rand.Rand) error {
		err := tx1(ctx, rng)
		if err == nil {
			done.Add(1)
		}
		return err
	})
	elapsed, goCPU, turns := time.Since(start), cpuTime()-cpu0, pool.rtt.turns.Load()-rtt0
	pg, _ := meter.stop(ctx)
	c.server(server.stop(ctx), pg)
	if err != nil {
		return CapWrite{}, err
	}
	// The short mode reads the WAL only where the model uses it (each
	// window costs a second of pg_walinspect on a busy server).
	var wal walGroups
	if !c.o.short || wc.events > 0 {
		if wal, err = c.wal.measure(ctx, lsn, []string{s.name}, []string{postgres.DefaultTable}); err != nil {
			return CapWrite{}, err
		}
	}
	n := done.Load()
	if n == 0 {
		return CapWrite{}, errors.New("no transaction committed")
	}
	per := func(v int64) float64 { return float64(v) / float64(n) }
	return CapWrite{Case: wc.name, EventsPerTx: wc.events, Notify: notifyName(wc.notify), Writers: c.o.capWriters, Tx: n, Seconds: elapsed.Seconds(),
		PGPerTx: us(pg) / float64(n), GoPerTx: us(goCPU) / float64(n), TurnsPerTx: per(turns),
		WALOutboxPerTx: per(wal.Outbox.Bytes), WALOtherPerTx: per(wal.Other.Bytes), WALCommitPerTx: per(wal.Commit.Bytes),
		WALFPIPerTx: per(wal.Outbox.FPI + wal.Other.FPI + wal.Commit.FPI), Load: load}, nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// --- relay drains ---

// CapDrain is one relay process draining a backlog at one batch size
// through one transport: every claim full, the relay's cost per event at
// its largest batches.
type CapDrain struct {
	Layout    string  `json:"layout,omitempty"`
	Batch     int     `json:"batch"`
	Transport string  `json:"transport"`
	Events    int     `json:"events"`
	Seconds   float64 `json:"seconds"`
	PGPerEv   float64 `json:"pg_cpu_us_per_event"`
	GoPerEv   float64 `json:"relay_cpu_us_per_event"`
	// PGPerClaim is the PostgreSQL CPU per claim round (claim and
	// settlement, pipelined).
	PGPerClaim     float64 `json:"pg_cpu_us_per_claim"`
	Claims         int64   `json:"claims"`
	TurnsPerClaim  float64 `json:"round_trips_per_claim"`
	WALPerEv       float64 `json:"wal_bytes_per_event"`
	WALCommitPerEv float64 `json:"wal_commit_bytes_per_event"`
	WALFPIPerEv    float64 `json:"wal_fpi_bytes_per_event"`
	// RoundMs is the mean time of one claim round in the relay (database
	// calls plus publish), and PublishMs the publish's share.
	RoundMs   float64 `json:"round_ms"`
	PublishMs float64 `json:"publish_ms"`
	// OtherPerEv is the transport's other side per event, when measured:
	// qstashdev and the consumer endpoint (this process), or the NATS
	// server (a broker other tests share).
	OtherPerEv float64 `json:"transport_cpu_us_per_event,omitempty"`
	RSSMiB     float64 `json:"relay_peak_rss_mib"`
	Load       string  `json:"load"`
	Rep        int     `json:"rep"`
	Check      string  `json:"check"`
}

// drainEvents is how many events a drain at batch moves: enough CPU time
// at every batch size to be measured to a few percent.
func (c *capRun) drainEvents(batch int) int {
	if c.o.short {
		return min(max(500, batch*50), 5000)
	}
	return min(max(4000, batch*400), 100_000)
}

// capTransport is the transport side a drain needs in this process.
type capTransport struct {
	spec    func(*capRelaySpec)
	other   func() time.Duration // CPU of the transport's other side so far
	check   func(ctx context.Context, n int) (string, bool)
	closeFn func()
}

func (t *capTransport) close() {
	if t.closeFn != nil {
		t.closeFn()
	}
}

// startTransport readies the transport of a drain of n events.
func (c *capRun) startTransport(ctx context.Context, kind string, n int) (*capTransport, error) {
	switch kind {
	case transportNoop:
		return &capTransport{spec: func(*capRelaySpec) {}, check: func(context.Context, int) (string, bool) { return "", true }}, nil
	case transportQStash:
		endpoint := &countingEndpoint{want: int64(n), seen: make(map[string]struct{}, n), all: make(chan struct{})}
		cl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		consumer := &http.Server{Handler: endpoint, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = consumer.Serve(cl) }()
		dev, err := qstashdev.New(qstashdev.Config{MaxEvents: 1000, MaxDeduplicationKeys: n + 1000,
			MaxPendingMessages: n + 1000, MaxPendingBytes: int64(n+1000) * 4096})
		if err != nil {
			consumer.Close()
			return nil, err
		}
		dl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			consumer.Close()
			dev.Close()
			return nil, err
		}
		go func() { _ = dev.Serve(dl) }()
		return &capTransport{
			spec: func(s *capRelaySpec) {
				s.QStashURL, s.QStashToken, s.QStashDestination = "http://"+dl.Addr().String(), qstashdev.DefaultToken, "http://"+cl.Addr().String()+"/events"
			},
			other: cpuTime,
			check: func(ctx context.Context, n int) (string, bool) {
				select {
				case <-endpoint.all:
				case <-time.After(drainTimeout(n)):
				case <-ctx.Done():
				}
				got := endpoint.distinct()
				return fmt.Sprintf("%d of %d events delivered to the consumer endpoint (%d deliveries), %d in qstashdev's DLQ", got, n, endpoint.deliveries.Load(), len(dev.DLQ())), got == n && len(dev.DLQ()) == 0
			},
			closeFn: func() { dev.Close(); consumer.Close() },
		}, nil
	case transportNATS:
		nc, err := nats.Connect(c.o.natsURL, nats.Name("outboxkit-bench capacity"))
		if err != nil {
			return nil, fmt.Errorf("NATS at %s: %w (start nats-server -js, or leave nats out of -capacity-transports)", c.o.natsURL, err)
		}
		js, err := nc.JetStream()
		if err != nil {
			nc.Close()
			return nil, err
		}
		subject := fmt.Sprintf("outboxkit_capacity_%d_%d", time.Now().UnixNano(), rand.IntN(1<<30))
		if _, err := js.AddStream(&nats.StreamConfig{Name: subject, Subjects: []string{subject}, Storage: nats.FileStorage}); err != nil {
			nc.Close()
			return nil, fmt.Errorf("NATS JetStream at %s: create stream: %w", c.o.natsURL, err)
		}
		pid := natsServerPID()
		return &capTransport{
			spec: func(s *capRelaySpec) { s.NATSURL, s.NATSSubject = c.o.natsURL, subject },
			other: func() time.Duration {
				if pid == 0 {
					return 0
				}
				t, _ := pidCPU(pid) // every thread's, in ticks
				return t
			},
			check: func(ctx context.Context, n int) (string, bool) {
				si, err := js.StreamInfo(subject)
				if err != nil {
					return "stream info: " + err.Error(), false
				}
				return fmt.Sprintf("%d of %d events in the JetStream stream", si.State.Msgs, n), si.State.Msgs == uint64(n)
			},
			closeFn: func() { _ = js.DeleteStream(subject); nc.Close() },
		}, nil
	case capKafka:
		const partitions = 6
		cluster, err := kafkatest.Start(3, partitions)
		if err != nil {
			return nil, err
		}
		cl, err := outboxkafka.NewClient(cluster.Seeds())
		if err != nil {
			cluster.Close()
			return nil, err
		}
		topic := fmt.Sprintf("outboxkit-capacity-%d", time.Now().UnixNano())
		if err := kafkatest.CreateTopic(ctx, cl, topic, partitions); err != nil {
			cl.Close()
			cluster.Close()
			return nil, err
		}
		return &capTransport{
			spec:  func(s *capRelaySpec) { s.KafkaSeeds, s.KafkaTopic = cluster.Seeds(), topic },
			other: cpuTime, // the kfake brokers run in this process
			check: func(ctx context.Context, n int) (string, bool) {
				held, _, err := kafkatest.EndOffsets(ctx, cl, topic)
				if err != nil {
					return "end offsets: " + err.Error(), false
				}
				return fmt.Sprintf("%d of %d events in the topic", held, n), held == int64(n)
			},
			closeFn: func() { cl.Close(); cluster.Close() },
		}, nil
	}
	return nil, fmt.Errorf("unknown transport %q", kind)
}

// natsServerPID finds a nats-server process on this host (0 if none):
// its CPU is the broker's side of the NATS transport.
func natsServerPID() int {
	b, err := readDirNames("/proc")
	if err != nil {
		return 0
	}
	for _, name := range b {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		if comm, err := readFileString("/proc/" + name + "/comm"); err == nil && comm == "nats-server\n" {
			return pid
		}
	}
	return 0
}

// measureDrain preloads a backlog and drains it with one relay process.
func (c *capRun) measureDrain(ctx context.Context, batch int, transport string, layout postgres.Partitioning, rep int) (CapDrain, error) {
	n := c.drainEvents(batch)
	s, err := c.capSchemaLayout(ctx, c.capHistory(), layout)
	if err != nil {
		return CapDrain{}, err
	}
	defer s.drop()
	if err := capPreload(ctx, s, n); err != nil {
		return CapDrain{}, err
	}
	tr, err := c.startTransport(ctx, transport, n)
	if err != nil {
		return CapDrain{}, err
	}
	defer tr.close()
	app := appName("relay", s)
	spec := capRelaySpec{DSN: c.o.dsn, Schema: s.name, App: app, Batch: batch, Events: int64(n), Transport: transport}
	tr.spec(&spec)
	child, err := startCapRelay(ctx, spec)
	if err != nil {
		return CapDrain{}, err
	}
	defer child.close()
	load := loadSnapshot()
	meter, err := newBackendMeter(ctx, c.admin, app)
	if err != nil {
		return CapDrain{}, err
	}
	lsn, err := c.wal.mark(ctx)
	if err != nil {
		return CapDrain{}, err
	}
	var other0 time.Duration
	if tr.other != nil {
		other0 = tr.other()
	}
	server := newServerCPU(ctx, c.admin)
	if err := child.say("go"); err != nil {
		return CapDrain{}, err
	}
	res, err := child.result(ctx, drainTimeout(n))
	if err != nil {
		return CapDrain{}, err
	}
	var other time.Duration
	if tr.other != nil {
		other = tr.other() - other0
	}
	pg, _ := meter.stop(ctx)
	c.logf("drain batch %d %s: relay backends%s", batch, transport, meter.detail())
	c.server(server.stop(ctx), pg)
	wal, err := c.wal.measure(ctx, lsn, []string{s.name}, []string{postgres.DefaultTable})
	if err != nil {
		return CapDrain{}, err
	}
	detail, ok := tr.check(ctx, n)
	left, err := pendingCount(ctx, s)
	if err != nil {
		return CapDrain{}, err
	}
	ok = ok && left == 0 && res.Settled >= int64(n) && res.Lost == 0 && res.Local
	detail = fmt.Sprintf("%d of %d settled, %d pending, %d under a lost lease, PostgreSQL on this host: %v; %s", res.Settled, n, left, res.Lost, res.Local, detail)
	if !ok {
		return CapDrain{}, fmt.Errorf("drain check failed: %s", detail)
	}
	claims := max(res.Claims-res.EmptyClaims, 1)
	d := CapDrain{Layout: layoutName(layout), Batch: batch, Transport: transport, Events: n, Seconds: res.Seconds,
		PGPerEv: us(pg) / float64(n), GoPerEv: res.CPUSeconds * 1e6 / float64(n), PGPerClaim: us(pg) / float64(claims), Claims: res.Claims,
		TurnsPerClaim: float64(res.Turns) / float64(claims), WALPerEv: float64(wal.Outbox.Bytes) / float64(n),
		WALCommitPerEv: float64(wal.Commit.Bytes) / float64(n), WALFPIPerEv: float64(wal.total().FPI) / float64(n),
		RoundMs: (res.DBSeconds + res.PublishSeconds) * 1e3 / float64(claims), PublishMs: res.PublishSeconds * 1e3 / float64(claims),
		RSSMiB: float64(res.RSSKiB) / 1024, Load: load, Rep: rep + 1, Check: detail}
	if other > 0 {
		d.OtherPerEv = us(other) / float64(n)
	}
	return d, nil
}

// --- empty claims ---

// CapEmpty is what a claim that finds nothing costs: what an idle relay
// pays per poll, and a relay between bursts per look.
type CapEmpty struct {
	Claims        int     `json:"claims"`
	PGPerClaim    float64 `json:"pg_cpu_us_per_claim"`
	TurnsPerClaim float64 `json:"round_trips_per_claim"`
	Load          string  `json:"load"`
	Rep           int     `json:"rep"`
}

func (c *capRun) measureEmpty(ctx context.Context, rep int) (CapEmpty, error) {
	s, err := c.capSchema(ctx, c.capHistory())
	if err != nil {
		return CapEmpty{}, err
	}
	defer s.drop()
	app := appName("empty", s)
	pool, err := newCapPool(ctx, c.o.dsn, 1, app)
	if err != nil {
		return CapEmpty{}, err
	}
	defer pool.Close()
	store, err := postgres.New(pool.Pool, &postgres.Config{Schema: s.name, Wakeup: postgres.WakeupPoll})
	if err != nil {
		return CapEmpty{}, err
	}
	// One event past the young-table threshold, claimed and settled, so
	// the claims are prepared as on an outbox with a history.
	if err := store.Add(ctx, c.admin, core.Event{ID: core.NewID(), Type: "bench", Payload: []byte(benchPayload)}); err != nil {
		return CapEmpty{}, err
	}
	b, err := store.Claim(ctx, core.ClaimRequest{Limit: 100, LeaseFor: time.Minute})
	if err != nil {
		return CapEmpty{}, err
	}
	out := make([]core.Outcome, len(b.Events))
	for i, e := range b.Events {
		out[i] = core.Outcome{ID: e.ID, Kind: core.Published}
	}
	if err := store.Settle(ctx, core.SettleRequest{Lease: b.Lease, Outcomes: out}); err != nil {
		return CapEmpty{}, err
	}
	k := 2000
	if c.o.short {
		k = 500
	}
	load := loadSnapshot()
	meter, err := newBackendMeter(ctx, c.admin, app)
	if err != nil {
		return CapEmpty{}, err
	}
	rtt0 := pool.rtt.turns.Load()
	for i := 0; i < k; i++ {
		b, err := store.Claim(ctx, core.ClaimRequest{Limit: 100, LeaseFor: time.Minute})
		if err != nil {
			return CapEmpty{}, err
		}
		if len(b.Events) > 0 {
			return CapEmpty{}, errors.New("an empty outbox returned events")
		}
	}
	turns := pool.rtt.turns.Load() - rtt0
	pg, _ := meter.stop(ctx)
	return CapEmpty{Claims: k, PGPerClaim: us(pg) / float64(k), TurnsPerClaim: float64(turns) / float64(k), Load: load, Rep: rep + 1}, nil
}

// --- paced runs: the wake-up modes ---

// CapPaced is a relay with its defaults (but for the store's wake-up)
// keeping up with writers at a steady rate: what each wake-up mode costs
// per event when batches are as small as the rate makes them.
type CapPaced struct {
	Wakeup  string  `json:"wakeup"`
	Rate    int     `json:"rate"`
	Events  int     `json:"events"`
	Reached float64 `json:"committed_per_s"`
	// Relay: PostgreSQL CPU per event (every backend of the relay, the
	// wake-up connection's included), the WAL sender's share, the relay
	// process's CPU, claims and empty claims per event, round trips per
	// event.
	PGPerEv        float64 `json:"relay_pg_cpu_us_per_event"`
	WalsenderPerEv float64 `json:"walsender_pg_cpu_us_per_event"`
	GoPerEv        float64 `json:"relay_cpu_us_per_event"`
	ClaimsPerEv    float64 `json:"claims_per_event"`
	EmptyPerEv     float64 `json:"empty_claims_per_event"`
	EventsPerClaim float64 `json:"events_per_claim"`
	TurnsPerEv     float64 `json:"round_trips_per_event"`
	// Writers: PostgreSQL CPU per event (Add in its own transaction, and
	// the after-commit notification in the LISTEN mode).
	WriterPGPerEv float64 `json:"writer_pg_cpu_us_per_event"`
	WriterNotify  string  `json:"writer_notify"`
	WakeupSeen    string  `json:"wakeup_connection"`
	// ServerWALKiB is the whole server's WAL over the run (everyone's):
	// what the WAL sender decoded.
	ServerWALKiB float64 `json:"server_wal_kib"`
	Load         string  `json:"load"`
	Rep          int     `json:"rep"`
}

// wakeups of the paced runs: the store's Wakeup and what writers send.
var capWakeups = map[string]struct {
	notify postgres.NotifyMode
	want   string
}{
	"wal":    {postgres.NotifyNone, wakeupWAL},
	"listen": {postgres.NotifyAfterCommit, wakeupListen},
	"poll":   {postgres.NotifyNone, wakeupNone},
}

func (c *capRun) measurePaced(ctx context.Context, wakeup string, rate int, rep int) (CapPaced, error) {
	mode, ok := capWakeups[wakeup]
	if !ok {
		return CapPaced{}, fmt.Errorf("unknown wake-up %q (wal, listen, poll)", wakeup)
	}
	n := int(float64(rate) * c.o.capPacedFor.Seconds())
	s, err := c.capSchema(ctx, c.capHistory())
	if err != nil {
		return CapPaced{}, err
	}
	defer s.drop()
	relayApp, writerApp := appName("relay", s), appName("writer", s)
	child, err := startCapRelay(ctx, capRelaySpec{DSN: c.o.dsn, Schema: s.name, App: relayApp, Events: int64(n), Wakeup: wakeup, Transport: transportNoop, Measure: true})
	if err != nil {
		return CapPaced{}, err
	}
	defer child.close()
	pool, err := newCapPool(ctx, c.o.dsn, int32(c.o.capWriters), writerApp)
	if err != nil {
		return CapPaced{}, err
	}
	defer pool.Close()
	store, err := postgres.New(pool.Pool, &postgres.Config{Schema: s.name, Notify: mode.notify})
	if err != nil {
		return CapPaced{}, err
	}
	if err := child.say("go"); err != nil {
		return CapPaced{}, err
	}
	// The relay's wake-up connection must be up before the writers start,
	// or the first events measure the relay's polling instead.
	// A replication slot waits for the transactions running when it is
	// made, which on a busy server can take long: past the wait the run
	// goes on with whatever wake-up the relay has, and says which.
	seen := wakeupNone
	if mode.want != wakeupNone {
		wait := idleReadyTimeout
		if c.o.short {
			wait = 15 * time.Second
		}
		deadline := time.Now().Add(wait)
		for {
			w, _, err := wakeupOf(ctx, c.admin, relayApp)
			if err != nil {
				return CapPaced{}, err
			}
			if seen = w; w == mode.want || (wakeup == "wal" && w == wakeupListen && !c.walStream) {
				break
			}
			if time.Now().After(deadline) {
				c.rep.Notes = append(c.rep.Notes, fmt.Sprintf("paced %s %d/s rep %d: the relay's wake-up connection was %s, not %s, after %s; measured as it was", wakeup, rate, rep+1, w, mode.want, wait))
				break
			}
			time.Sleep(20 * time.Millisecond) // polling pg_stat_activity
		}
	}
	load := loadSnapshot()
	relayMeter, err := newBackendMeter(ctx, c.admin, relayApp)
	if err != nil {
		return CapPaced{}, err
	}
	writerMeter, err := newBackendMeter(ctx, c.admin, writerApp)
	if err != nil {
		return CapPaced{}, err
	}
	var lsn0 string
	if err := c.admin.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn0); err != nil {
		return CapPaced{}, err
	}
	if err := child.say("measure"); err != nil {
		return CapPaced{}, err
	}
	payload := []byte(benchPayload)
	reached, err := pace(ctx, n, rate, c.o.capWriters, func(ctx context.Context, i int) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		if err := store.Add(ctx, tx, core.Event{ID: core.NewID(), Type: "bench", Payload: payload}); err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		store.Notify()
		return nil
	})
	if err != nil {
		return CapPaced{}, err
	}
	wpg, _ := writerMeter.stop(ctx)
	res, err := child.result(ctx, 60*time.Second)
	if err != nil {
		return CapPaced{}, err
	}
	pg, walsender := relayMeter.stop(ctx)
	var serverWAL float64
	if err := c.admin.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::float8`, lsn0).Scan(&serverWAL); err != nil {
		return CapPaced{}, err
	}
	c.logf("paced %s %d/s: relay backends%s", wakeup, rate, relayMeter.detail())
	if res.Settled < int64(n) || res.Lost > 0 {
		return CapPaced{}, fmt.Errorf("paced %s %d/s: %d of %d settled, %d under a lost lease", wakeup, rate, res.Settled, n, res.Lost)
	}
	fn := float64(n)
	found := max(res.Claims-res.EmptyClaims, 1)
	return CapPaced{Wakeup: wakeup, Rate: rate, Events: n, Reached: reached,
		PGPerEv: us(pg) / fn, WalsenderPerEv: us(walsender) / fn, GoPerEv: res.CPUSeconds * 1e6 / fn,
		ClaimsPerEv: float64(res.Claims) / fn, EmptyPerEv: float64(res.EmptyClaims) / fn, EventsPerClaim: float64(res.ClaimedRows) / float64(found),
		TurnsPerEv: float64(res.Turns) / fn, WriterPGPerEv: us(wpg) / fn, WriterNotify: notifyName(mode.notify), WakeupSeen: seen, ServerWALKiB: serverWAL / 1024,
		Load: load, Rep: rep + 1}, nil
}

// --- consumers ---

// CapConsumer is one consumer-side operation's cost per delivery.
type CapConsumer struct {
	Case        string  `json:"case"`
	Deliveries  int     `json:"deliveries"`
	Callers     int     `json:"callers"`
	Seconds     float64 `json:"seconds"`
	PGPerEv     float64 `json:"pg_cpu_us_per_delivery"`
	GoPerEv     float64 `json:"go_cpu_us_per_delivery,omitempty"`
	TurnsPerEv  float64 `json:"round_trips_per_delivery"`
	WALPerEv    float64 `json:"wal_bytes_per_delivery"`
	WALFPIPerEv float64 `json:"wal_fpi_bytes_per_delivery"`
	Load        string  `json:"load"`
	Rep         int     `json:"rep"`
}

// Consumer cases.
const (
	consumerDedupe      = "Deduper.Once"
	consumerSequence    = "Sequencer.OnceInOrder"
	consumerAccept      = "Inbox.Accept (receiving side)"
	consumerInboxWorker = "inbox worker (Run: claim, Deduper.Once, settle)"
)

func (c *capRun) consumerDeliveries() int {
	if c.o.short {
		return 400
	}
	return 6000
}

// measureConsumers runs Deduper.Once, Sequencer.OnceInOrder, Inbox.Accept
// and the inbox's workers, each applying one effect row per delivery.
func (c *capRun) measureConsumers(ctx context.Context, rep int) error {
	n, callers := c.consumerDeliveries(), c.o.capWriters
	s, err := createSchema(ctx, c.admin)
	if err != nil {
		return err
	}
	c.schemas = append(c.schemas, s.name)
	defer s.drop()
	inboxTable := consumerName + "_inbox"
	for _, t := range []string{postgres.DefaultTable, inboxTable} {
		if err := postgres.Migrate(ctx, c.admin, &postgres.MigrateConfig{Schema: s.name, Table: t}); err != nil {
			return fmt.Errorf("migrate %s: %w", s.name, err)
		}
	}
	if _, err := c.admin.Exec(ctx, `CREATE TABLE `+s.table(consumerEffects)+` (n bigserial PRIMARY KEY, event_id uuid NOT NULL, aggregate_id text NOT NULL, sequence bigint NOT NULL)`); err != nil {
		return err
	}
	if err := c.history(ctx, s, inboxTable, c.capHistory()); err != nil {
		return err
	}
	insert := `INSERT INTO ` + s.table(consumerEffects) + ` (event_id, aggregate_id, sequence) VALUES ($1, $2, $3)`
	effectTx := func(ctx context.Context, tx pgx.Tx, e core.Event) error {
		_, err := tx.Exec(ctx, insert, pgtype.UUID{Bytes: e.ID, Valid: true}, e.AggregateID, e.Sequence)
		return err
	}
	events := make([]core.Event, n)
	now := time.Now().UTC()
	for i := range events {
		events[i] = core.Event{ID: core.NewID(), Type: "order.confirmed", Source: "bench", CreatedAt: now,
			AggregateType: "order", AggregateID: "order-" + strconv.Itoa(i%consumerAggregates), Sequence: int64(i/consumerAggregates) + 1,
			Payload: []byte(benchPayload)}
	}
	// byCaller deals the events out so that each aggregate's go through
	// one caller, in sequence order.
	byCaller := make([][]core.Event, callers)
	for i, e := range events {
		k := (i % consumerAggregates) % callers
		byCaller[k] = append(byCaller[k], e)
	}
	// run measures one operation: setup binds it to a pool of its own, then
	// callers goroutines apply their events through it.
	run := func(name string, setup func(db *capPool) (func(ctx context.Context, e core.Event) error, error), tables []string) error {
		app := appName("consumer", s)
		pool, err := newCapPool(ctx, c.o.dsn, int32(callers), app)
		if err != nil {
			return err
		}
		defer pool.Close()
		fn, err := setup(pool)
		if err != nil {
			return err
		}
		if _, err := c.admin.Exec(ctx, `TRUNCATE `+s.table(consumerEffects)); err != nil {
			return err
		}
		load := loadSnapshot()
		meter, err := newBackendMeter(ctx, c.admin, app)
		if err != nil {
			return err
		}
		lsn, err := c.wal.mark(ctx)
		if err != nil {
			return err
		}
		rtt0, cpu0, start := pool.rtt.turns.Load(), cpuTime(), time.Now()
		var wg sync.WaitGroup
		var errs onceErr
		for k := 0; k < callers; k++ {
			wg.Go(func() {
				for _, e := range byCaller[k] {
					if errs.get() != nil || ctx.Err() != nil {
						return
					}
					errs.set(fn(ctx, e))
				}
			})
		}
		wg.Wait()
		if err := errs.get(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		elapsed, goCPU, turns := time.Since(start), cpuTime()-cpu0, pool.rtt.turns.Load()-rtt0
		pg, _ := meter.stop(ctx)
		var wal walGroups
		if !c.o.short || name == consumerDedupe {
			if wal, err = c.wal.measure(ctx, lsn, []string{s.name}, tables); err != nil {
				return err
			}
		}
		fn64 := float64(n)
		r := CapConsumer{Case: name, Deliveries: n, Callers: callers, Seconds: elapsed.Seconds(),
			PGPerEv: us(pg) / fn64, GoPerEv: us(goCPU) / fn64, TurnsPerEv: float64(turns) / fn64,
			WALPerEv: float64(wal.Outbox.Bytes+wal.Commit.Bytes) / fn64, WALFPIPerEv: float64(wal.total().FPI) / fn64, Load: load, Rep: rep + 1}
		c.rep.Consumer = append(c.rep.Consumer, r)
		c.logf("consumer %s rep %d: PG %.1f µs/delivery, %.2f round trips, WAL %.0f B (load %s)", name, rep+1, r.PGPerEv, r.TurnsPerEv, r.WALPerEv, load)
		return nil
	}
	// The WAL counted is the operation's own tables' (the effects table's
	// is the handler's, the same in every case) and the commit records.
	type consumerCase struct {
		name  string
		setup func(db *capPool) (func(ctx context.Context, e core.Event) error, error)
		tabs  []string
	}
	cases := []consumerCase{
		{consumerDedupe, func(db *capPool) (func(ctx context.Context, e core.Event) error, error) {
			d, err := postgres.NewDeduper(db.Pool, &postgres.DeduperConfig{Schema: s.name})
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context, e core.Event) error {
				_, err := d.Once(ctx, core.DedupeKey{Consumer: consumerName, EventID: e.ID}, func(ctx context.Context) error {
					tx, _ := postgres.TxFromContext(ctx)
					return effectTx(ctx, tx, e)
				})
				return err
			}, nil
		}, []string{postgres.DefaultTable + "_processed"}},
		{consumerSequence, func(db *capPool) (func(ctx context.Context, e core.Event) error, error) {
			sq, err := postgres.NewSequencer(db.Pool, &postgres.SequencerConfig{Schema: s.name})
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context, e core.Event) error {
				applied, err := sq.OnceInOrder(ctx, consumerName, e, func(ctx context.Context) error {
					tx, _ := postgres.TxFromContext(ctx)
					return effectTx(ctx, tx, e)
				})
				if err == nil && !applied {
					err = fmt.Errorf("event %d of %s not applied", e.Sequence, e.AggregateID)
				}
				return err
			}, nil
		}, []string{postgres.DefaultTable + "_sequences"}},
	}
	for _, cs := range rotate(cases, rep) {
		if err := run(cs.name, cs.setup, cs.tabs); err != nil {
			return err
		}
	}
	// The inbox: every delivery accepted (one statement each), then the
	// workers apply them (a relay over the inbox table, batches of 10).
	if err := run(consumerAccept, func(db *capPool) (func(ctx context.Context, e core.Event) error, error) {
		in, err := postgres.NewInbox(db.Pool, &postgres.InboxConfig{Consumer: consumerName, Store: postgres.Config{Schema: s.name}})
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, e core.Event) error {
			_, err := in.Accept(ctx, db.Pool, e)
			return err
		}, nil
	}, []string{inboxTable}); err != nil {
		return err
	}
	return c.measureInboxWorker(ctx, s, inboxTable, n, effectTx, rep)
}

func (c *capRun) measureInboxWorker(ctx context.Context, s *schema, table string, n int, effect func(context.Context, pgx.Tx, core.Event) error, rep int) error {
	app := appName("inbox", s)
	pool, err := newCapPool(ctx, c.o.dsn, 3, app)
	if err != nil {
		return err
	}
	defer pool.Close()
	applied := newSettleCounter(n)
	worker, err := postgres.NewInbox(pool.Pool, &postgres.InboxConfig{
		Consumer: consumerName, Store: postgres.Config{Schema: s.name, Wakeup: postgres.WakeupPoll}, Handler: postgres.Effect(effect),
		Relay: core.RelayConfig{Hooks: []core.RelayHook{applied}, PollInterval: 10 * time.Millisecond},
	})
	if err != nil {
		return err
	}
	load := loadSnapshot()
	meter, err := newBackendMeter(ctx, c.admin, app)
	if err != nil {
		return err
	}
	lsn, err := c.wal.mark(ctx)
	if err != nil {
		return err
	}
	rtt0, cpu0, start := pool.rtt.turns.Load(), cpuTime(), time.Now()
	wctx, cancel := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- worker.Run(wctx) }()
	var waitErr error
	select {
	case <-applied.done:
	case <-time.After(drainTimeout(n)):
		waitErr = fmt.Errorf("inbox workers applied %d of %d", applied.n.Load(), n)
	case <-ctx.Done():
		waitErr = ctx.Err()
	}
	elapsed, goCPU, turns := time.Since(start), cpuTime()-cpu0, pool.rtt.turns.Load()-rtt0
	pg, _ := meter.stop(ctx)
	cancel()
	if err := <-runErr; err != nil && !errors.Is(err, context.Canceled) && waitErr == nil {
		waitErr = err
	}
	if waitErr != nil {
		return waitErr
	}
	var wal walGroups
	if !c.o.short {
		if wal, err = c.wal.measure(ctx, lsn, []string{s.name}, []string{table, table + "_processed"}); err != nil {
			return err
		}
	}
	var rows int64
	if err := c.admin.QueryRow(ctx, `SELECT count(*) FROM `+s.table(consumerEffects)).Scan(&rows); err != nil {
		return err
	}
	if rows != int64(n) {
		return fmt.Errorf("inbox workers: %d effect rows for %d deliveries", rows, n)
	}
	fn := float64(n)
	c.rep.Consumer = append(c.rep.Consumer, CapConsumer{Case: consumerInboxWorker, Deliveries: n, Callers: 2, Seconds: elapsed.Seconds(),
		PGPerEv: us(pg) / fn, GoPerEv: us(goCPU) / fn, TurnsPerEv: float64(turns) / fn,
		WALPerEv: float64(wal.Outbox.Bytes+wal.Commit.Bytes) / fn, WALFPIPerEv: float64(wal.total().FPI) / fn, Load: load, Rep: rep + 1})
	c.logf("consumer %s rep %d: PG %.1f µs/delivery (load %s)", consumerInboxWorker, rep+1, us(pg)/fn, load)
	return nil
}

// --- retention: sizes, vacuum, prune ---

// CapRetention is what keeping published events costs: their size, the
// VACUUM that reclaims the dead row versions a claim and a settlement
// leave, and the prune that deletes them at the end of the retention.
type CapRetention struct {
	Layout string `json:"layout,omitempty"`
	Events int    `json:"events"`
	// Bytes per published event kept, before and after VACUUM (the dead
	// versions of the claim and the settlement take space until VACUUM
	// reclaims it), for the table and its indexes.
	HeapBytesBefore  float64 `json:"heap_bytes_per_event_before_vacuum"`
	IndexBytesBefore float64 `json:"index_bytes_per_event_before_vacuum"`
	HeapBytes        float64 `json:"heap_bytes_per_event"`
	IndexBytes       float64 `json:"index_bytes_per_event"`
	// VACUUM after the drain, per event: PostgreSQL CPU and WAL.
	VacuumPGPerEv  float64 `json:"vacuum_pg_cpu_us_per_event"`
	VacuumWALPerEv float64 `json:"vacuum_wal_bytes_per_event"`
	// Prune after a CHECKPOINT (rows kept for days were last written before
	// the last checkpoint, so deleting them takes full-page images), then
	// the VACUUM of the deleted rows.
	PrunePGPerEv        float64 `json:"prune_pg_cpu_us_per_event"`
	PruneWALPerEv       float64 `json:"prune_wal_bytes_per_event"`
	PruneFPIPerEv       float64 `json:"prune_wal_fpi_bytes_per_event"`
	PruneTurnsPerEv     float64 `json:"prune_round_trips_per_event"`
	PruneVacuumPGPerEv  float64 `json:"prune_vacuum_pg_cpu_us_per_event"`
	PruneVacuumWALPerEv float64 `json:"prune_vacuum_wal_bytes_per_event"`
	// The processed-events record of a consumer (Deduper), per delivery.
	ProcessedBytes float64 `json:"processed_bytes_per_delivery"`
	Load           string  `json:"load"`
	Rep            int     `json:"rep"`
}

func (c *capRun) measureRetention(ctx context.Context, rep int) (CapRetention, error) {
	n := 20_000
	if c.o.short {
		n = 3000
	}
	s, err := c.capSchema(ctx, 0)
	if err != nil {
		return CapRetention{}, err
	}
	defer s.drop()
	if err := capPreload(ctx, s, n); err != nil {
		return CapRetention{}, err
	}
	load := loadSnapshot()
	// Relay them all (batch 100, in this process: only the state it
	// leaves matters here).
	pool, err := newCapPool(ctx, c.o.dsn, 3, appName("retention", s))
	if err != nil {
		return CapRetention{}, err
	}
	defer pool.Close()
	store, err := postgres.New(pool.Pool, &postgres.Config{Schema: s.name, Wakeup: postgres.WakeupPoll})
	if err != nil {
		return CapRetention{}, err
	}
	ctr := newSettleCounter(n)
	relay, err := core.NewRelay(store, &countSink{}, &core.RelayConfig{DisableNotifier: true, PollInterval: 10 * time.Millisecond, Hooks: []core.RelayHook{ctr}})
	if err != nil {
		return CapRetention{}, err
	}
	if _, err := timeRelay(ctx, relay, ctr, func() (*cpuMeter, error) { return &cpuMeter{}, nil }, n, ""); err != nil {
		return CapRetention{}, err
	}
	table := s.table(postgres.DefaultTable)
	sizes := func() (heap, idx float64, err error) {
		var h, i int64
		err = c.admin.QueryRow(ctx, `SELECT pg_relation_size($1::regclass), pg_indexes_size($1::regclass)`, table).Scan(&h, &i)
		return float64(h) / float64(n), float64(i) / float64(n), err
	}
	r := CapRetention{Events: n, Load: load, Rep: rep + 1}
	if r.HeapBytesBefore, r.IndexBytesBefore, err = sizes(); err != nil {
		return r, err
	}
	// A statement on a connection of its own, measured.
	measured := func(sql string, args ...any) (pg time.Duration, wal walGroups, turns int64, err error) {
		app := appName("maint", s)
		p, err := newCapPool(ctx, c.o.dsn, 1, app)
		if err != nil {
			return 0, wal, 0, err
		}
		defer p.Close()
		meter, err := newBackendMeter(ctx, c.admin, app)
		if err != nil {
			return 0, wal, 0, err
		}
		lsn, err := c.wal.mark(ctx)
		if err != nil {
			return 0, wal, 0, err
		}
		rtt0 := p.rtt.turns.Load()
		if sql == "prune" {
			ps, perr := postgres.New(p.Pool, &postgres.Config{Schema: s.name, Wakeup: postgres.WakeupPoll})
			if perr == nil {
				var k int64
				k, perr = ps.Prune(ctx, core.PruneRequest{PublishedBefore: time.Now().Add(time.Hour)})
				if perr == nil && k != int64(n) {
					perr = fmt.Errorf("prune deleted %d of %d", k, n)
				}
			}
			err = perr
		} else {
			_, err = p.Exec(ctx, sql, args...)
		}
		turns = p.rtt.turns.Load() - rtt0
		pg, _ = meter.stop(ctx)
		if err != nil {
			return 0, wal, 0, err
		}
		wal, err = c.wal.measure(ctx, lsn, []string{s.name}, []string{postgres.DefaultTable})
		return pg, wal, turns, err
	}
	fn := float64(n)
	pg, wal, _, err := measured(`VACUUM ` + table)
	if err != nil {
		return r, fmt.Errorf("vacuum: %w", err)
	}
	r.VacuumPGPerEv, r.VacuumWALPerEv = us(pg)/fn, float64(wal.total().Bytes+wal.total().FPI)/fn
	if r.HeapBytes, r.IndexBytes, err = sizes(); err != nil {
		return r, err
	}
	if _, err := c.admin.Exec(ctx, `CHECKPOINT`); err != nil {
		return r, err
	}
	pg, wal, turns, err := measured("prune")
	if err != nil {
		return r, fmt.Errorf("prune: %w", err)
	}
	r.PrunePGPerEv, r.PruneWALPerEv, r.PruneFPIPerEv, r.PruneTurnsPerEv = us(pg)/fn, float64(wal.total().Bytes)/fn, float64(wal.total().FPI)/fn, float64(turns)/fn
	pg, wal, _, err = measured(`VACUUM ` + table)
	if err != nil {
		return r, fmt.Errorf("vacuum after prune: %w", err)
	}
	r.PruneVacuumPGPerEv, r.PruneVacuumWALPerEv = us(pg)/fn, float64(wal.total().Bytes+wal.total().FPI)/fn
	// A Deduper's record per delivery, from the consumer measurement's
	// table shape: measured here on n records written in one statement.
	var pb int64
	if _, err := c.admin.Exec(ctx, `INSERT INTO `+s.table(postgres.DefaultTable+"_processed")+` (consumer, event_id)
SELECT 'bench', gen_random_uuid() FROM generate_series(1, `+strconv.Itoa(n)+`)`); err != nil {
		return r, fmt.Errorf("processed records: %w", err)
	}
	if err := c.admin.QueryRow(ctx, `SELECT pg_total_relation_size($1::regclass)`, s.table(postgres.DefaultTable+"_processed")).Scan(&pb); err != nil {
		return r, err
	}
	r.ProcessedBytes = float64(pb) / fn
	return r, nil
}

// readDirNames lists a directory's entries.
func readDirNames(dir string) ([]string, error) {
	es, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(es))
	for i, e := range es {
		names[i] = e.Name()
	}
	return names, nil
}

func readFileString(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}

// layoutName is a layout's name in the report: plain, daily or hourly.
func layoutName(l postgres.Partitioning) string {
	if l == postgres.PartitionNone {
		return "plain"
	}
	return l.String()
}

// measureRetentionPartitioned is retention on the partitioned layout:
// published events in an hourly partition of hours ago, dropped whole by
// Partitions.Maintain (Retention's leader does it), after a CHECKPOINT.
func (c *capRun) measureRetentionPartitioned(ctx context.Context, rep int) (CapRetention, error) {
	n := 20_000
	if c.o.short {
		n = 3000
	}
	s, err := c.capSchemaLayout(ctx, 0, postgres.PartitionHourly)
	if err != nil {
		return CapRetention{}, err
	}
	defer s.drop()
	app := appName("maint", s)
	p, err := newCapPool(ctx, c.o.dsn, 1, app)
	if err != nil {
		return CapRetention{}, err
	}
	defer p.Close()
	parts, err := postgres.NewPartitions(p.Pool, &postgres.PartitionsConfig{Schema: s.name})
	if err != nil {
		return CapRetention{}, err
	}
	var then time.Time
	if err := c.admin.QueryRow(ctx, `SELECT date_trunc('hour', now()) - interval '3 hours'`).Scan(&then); err != nil {
		return CapRetention{}, err
	}
	if _, err := parts.Create(ctx, then, then.Add(time.Hour)); err != nil {
		return CapRetention{}, fmt.Errorf("create the partition of %s: %w", then, err)
	}
	t := s.table(postgres.DefaultTable)
	if _, err := c.admin.Exec(ctx, `INSERT INTO `+t+` (id, event_type, payload, created_at, available_at, published_at, attempts)
SELECT `+uuidV7+`, 'bench', `+growthPayload+`, ts, ts, ts + interval '1 millisecond', 1
FROM (SELECT $2::timestamptz + g * interval '100 microseconds' AS ts FROM generate_series(1, $1::int) g) h`, n, then); err != nil {
		return CapRetention{}, fmt.Errorf("published rows of %s: %w", then, err)
	}
	var heap, idx int64
	if err := c.admin.QueryRow(ctx, `SELECT sum(pg_relation_size(i.inhrelid)), sum(pg_indexes_size(i.inhrelid))
FROM pg_inherits i WHERE i.inhparent = $1::regclass`, t).Scan(&heap, &idx); err != nil {
		return CapRetention{}, err
	}
	if _, err := c.admin.Exec(ctx, `CHECKPOINT`); err != nil {
		return CapRetention{}, err
	}
	load := loadSnapshot()
	meter, err := newBackendMeter(ctx, c.admin, app)
	if err != nil {
		return CapRetention{}, err
	}
	lsn, err := c.wal.mark(ctx)
	if err != nil {
		return CapRetention{}, err
	}
	rtt0 := p.rtt.turns.Load()
	rep0, err := parts.Maintain(ctx, postgres.PartitionMaintenance{PublishedBefore: then.Add(2 * time.Hour)})
	turns := p.rtt.turns.Load() - rtt0
	pg, _ := meter.stop(ctx)
	if err == nil && rep0.Err != nil {
		err = rep0.Err
	}
	if err != nil {
		return CapRetention{}, fmt.Errorf("maintain: %w", err)
	}
	var left int64
	if err := c.admin.QueryRow(ctx, `SELECT count(*) FROM `+t).Scan(&left); err != nil {
		return CapRetention{}, err
	}
	if len(rep0.Dropped) == 0 || left != 0 {
		return CapRetention{}, fmt.Errorf("maintain dropped %v, %d rows left", rep0.Dropped, left)
	}
	// The dropped partition's relations are gone: count the WAL of the
	// schema's remaining relations and the commit records (a DROP's WAL is
	// a handful of records whatever the partition held).
	wal, err := c.wal.measure(ctx, lsn, []string{s.name}, []string{postgres.DefaultTable})
	if err != nil {
		return CapRetention{}, err
	}
	fn := float64(n)
	r := CapRetention{Layout: layoutName(postgres.PartitionHourly), Events: n, Load: load, Rep: rep + 1,
		HeapBytes: float64(heap) / fn, IndexBytes: float64(idx) / fn, HeapBytesBefore: float64(heap) / fn, IndexBytesBefore: float64(idx) / fn,
		PrunePGPerEv: us(pg) / fn, PruneWALPerEv: float64(wal.total().Bytes) / fn, PruneFPIPerEv: float64(wal.total().FPI) / fn, PruneTurnsPerEv: float64(turns) / fn}
	return r, nil
}
