// Command chaosconsumer is the consumer process of the chaos suite
// (internal/chaos): a qstash.Receiver whose handler applies each
// "order.placed" event through the PostgreSQL Deduper, by counting it in the
// effects table of -schema:
//
//	effects(event_id uuid PRIMARY KEY, applied int)   -- +1 per application
//	dups(event_id uuid PRIMARY KEY, n int)            -- +1 per suppressed duplicate
//
// An effect counted twice is a broken exactly-once promise; the suite checks
// that none is. Events of type "chaos.panic" make the handler panic; any
// other type has no handler (a permanent error: QStash dead-letters it).
//
// It serves on the listening socket inherited as file descriptor 3, so the
// suite can restart it on the same address while deliveries wait in the
// socket's backlog. Its crash modes, chosen per event ID so that a
// redelivery (a duplicate) never crashes again:
//
//	-crash-every n   SIGKILL itself after the effect committed and before
//	                 answering, for about one applied event in n
//	-hijack-every n  close the connection after the effect committed
//	                 instead of answering, for about one applied event in n
//
// It prints "crash-after-commit" or "hijack" on stdout before each. SIGTERM
// stops it gracefully.
//
// With -ordered it is the consumer of the ordered suite instead: its
// Deduper is a postgres.Sequencer, and the handler of "order.step" records
// each event in
//
//	ordered_effects(serial bigserial, aggregate_id text, sequence bigint, event_id uuid)
//
// in the effect's transaction, after checking there that the aggregate's
// previous sequence is already recorded (it prints "order-violation" and
// fails the delivery otherwise: the suite expects none). It prints one line
// per sequencer decision other than applied ("sequence-gap",
// "sequence-stale", "sequence-gap-alert", "sequence-parked",
// "sequence-applied-over-gap") for the suite to count, and
//
//	-fail-every n    answers 503 without reading the delivery, for about one
//	                 request in n, so QStash delivers it again later and its
//	                 successors overtake it
//
// prints "fail-before" for each.
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/chaos/cmd/internal/worker"
	"github.com/outboxkit/outboxkit/postgres"
	"github.com/outboxkit/outboxkit/qstash"
)

type options struct {
	db                      worker.DB
	url, consumer           string
	currentKey, nextKey     string
	crashEvery, hijackEvery uint64

	ordered       bool
	gapPolicy     string
	gapTimeout    time.Duration
	gapRetryAfter time.Duration
	gapAlertAfter time.Duration
	failEvery     uint64
}

func main() {
	var o options
	o.db.Flags(flag.CommandLine, "chaosconsumer", "schema of the processed, effects and dups tables", 6)
	flag.StringVar(&o.url, "url", "", "this endpoint's URL as QStash signs it (required)")
	flag.StringVar(&o.consumer, "consumer", "chaos", "consumer name in the Deduper")
	flag.StringVar(&o.currentKey, "current-key", "", "QStash current signing key (required)")
	flag.StringVar(&o.nextKey, "next-key", "", "QStash next signing key (required)")
	flag.Uint64Var(&o.crashEvery, "crash-every", 0, "SIGKILL after commit for about 1 applied event in n (0: never)")
	flag.Uint64Var(&o.hijackEvery, "hijack-every", 0, "drop the connection after commit for about 1 applied event in n (0: never)")
	flag.BoolVar(&o.ordered, "ordered", false, "the ordered suite's consumer: a postgres.Sequencer and the ordered_effects table")
	flag.StringVar(&o.gapPolicy, "gap-policy", "wait", "with -ordered: the Sequencer's gap policy (wait, park or apply-anyway)")
	flag.DurationVar(&o.gapTimeout, "gap-timeout", 0, "with -ordered: the Sequencer's GapTimeout (0: its default)")
	flag.DurationVar(&o.gapRetryAfter, "gap-retry-after", 0, "with -ordered: the Sequencer's GapRetryAfter (0: its default)")
	flag.DurationVar(&o.gapAlertAfter, "gap-alert-after", 0, "with -ordered: the Sequencer's GapAlertAfter (0: its default)")
	flag.Uint64Var(&o.failEvery, "fail-every", 0, "answer 503 before reading the delivery for about 1 request in n (0: never)")
	worker.Main("chaosconsumer", func(ctx context.Context) error { return run(ctx, o) })
}

func run(ctx context.Context, o options) error {
	if o.db.URL == "" || o.db.Schema == "" || o.url == "" || o.currentKey == "" || o.nextKey == "" {
		return errors.New("-database-url, -schema, -url, -current-key and -next-key are required")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

	ln, err := net.FileListener(os.NewFile(3, "listener"))
	if err != nil {
		return fmt.Errorf("inherited listener (fd 3): %w", err)
	}
	pool, err := o.db.Pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	var dedup core.Deduper
	if o.ordered {
		if dedup, err = sequencer(pool, o); err != nil {
			return err
		}
	} else if dedup, err = postgres.NewDeduper(pool, &postgres.DeduperConfig{Schema: o.db.Schema}); err != nil {
		return err
	}
	effects := pgx.Identifier{o.db.Schema, "effects"}.Sanitize()
	dups := pgx.Identifier{o.db.Schema, "dups"}.Sanitize()

	// The bad-input suite sends types no handler knows and expects them
	// dead-lettered at once; the default (retry for an hour, for rolling
	// deploys) is covered in core's Mux tests.
	mux := core.NewMux(core.DeadLetterUnknownTypes())
	mux.Register("order.placed", postgres.Effect(func(ctx context.Context, tx pgx.Tx, e core.Event) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+effects+` AS f (event_id, applied) VALUES ($1, 1)
			ON CONFLICT (event_id) DO UPDATE SET applied = f.applied + 1`, e.ID.String())
		return err
	}))
	if o.ordered {
		mux.Register("order.step", postgres.Effect(orderedEffect(o.db.Schema)))
	}
	mux.RegisterFunc("chaos.panic", func(context.Context, core.Event) error {
		panic("chaos: this handler always panics")
	})

	onDecision := func(ctx context.Context, d qstash.Decision) {
		switch d.Outcome {
		case qstash.OutcomeDuplicate:
			// Counted outside the effect's transaction, for the report only:
			// a crash here undercounts redeliveries, never effects.
			_, _ = pool.Exec(context.WithoutCancel(ctx), `INSERT INTO `+dups+` AS d (event_id, n) VALUES ($1, 1)
				ON CONFLICT (event_id) DO UPDATE SET n = d.n + 1`, d.Event.ID.String())
		case qstash.OutcomeApplied:
			// The effect has committed and nothing has been answered yet.
			sel := binary.BigEndian.Uint64(d.Event.ID[8:])
			if o.crashEvery > 0 && sel%o.crashEvery == 0 {
				fmt.Fprintln(os.Stdout, "crash-after-commit")
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
			if o.hijackEvery > 0 && sel%o.hijackEvery == 1 {
				if f, ok := ctx.Value(hijackKey{}).(*bool); ok {
					*f = true
				}
			}
		}
	}
	rc, err := qstash.NewReceiver(&qstash.ReceiverConfig{
		CurrentSigningKey: o.currentKey, NextSigningKey: o.nextKey, URL: o.url,
		Handler: mux, Deduper: dedup, Consumer: o.consumer, OnDecision: onDecision, Logger: log,
	})
	if err != nil {
		return err
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o.failEvery > 0 && rand.Uint64N(o.failEvery) == 0 {
			fmt.Fprintln(os.Stdout, "fail-before")
			http.Error(w, `{"error":"chaos: unavailable"}`, http.StatusServiceUnavailable)
			return
		}
		hijack := new(bool)
		r = r.WithContext(context.WithValue(r.Context(), hijackKey{}, hijack))
		rc.ServeHTTP(&hijackingWriter{ResponseWriter: w, hijack: hijack}, r)
	})
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// sequencer is the -ordered consumer's Deduper. Its decisions other than
// applied are printed for the suite to count.
func sequencer(pool *pgxpool.Pool, o options) (*postgres.Sequencer, error) {
	policies := map[string]postgres.GapPolicy{"wait": postgres.GapWait, "park": postgres.GapPark, "apply-anyway": postgres.GapApplyAnyway}
	policy, ok := policies[o.gapPolicy]
	if !ok {
		return nil, fmt.Errorf("-gap-policy %q: use wait, park or apply-anyway", o.gapPolicy)
	}
	return postgres.NewSequencer(pool, &postgres.SequencerConfig{
		Schema: o.db.Schema, GapPolicy: policy, GapTimeout: o.gapTimeout,
		GapRetryAfter: o.gapRetryAfter, GapAlertAfter: o.gapAlertAfter,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		OnDecision: func(_ context.Context, d core.SequenceDecision) {
			if d.Outcome != core.SequenceApplied {
				fmt.Fprintln(os.Stdout, "sequence-"+strings.ReplaceAll(d.Outcome.String(), "_", "-"))
			}
		},
	})
}

// orderedEffect records an "order.step" event in ordered_effects, in the
// effect's transaction, once its predecessor is recorded there: the
// Sequencer's promise seen from the effect itself.
func orderedEffect(schema string) func(ctx context.Context, tx pgx.Tx, e core.Event) error {
	effects := pgx.Identifier{schema, "ordered_effects"}.Sanitize()
	return func(ctx context.Context, tx pgx.Tx, e core.Event) error {
		if e.Sequence > 1 {
			var prev bool
			err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM `+effects+` WHERE aggregate_id = $1 AND sequence = $2)`,
				e.AggregateID, e.Sequence-1).Scan(&prev)
			if err != nil {
				return err
			}
			if !prev {
				fmt.Fprintln(os.Stdout, "order-violation")
				return fmt.Errorf("chaos: event %s is sequence %d of %s, but sequence %d has no effect yet", e.ID, e.Sequence, e.AggregateID, e.Sequence-1)
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+effects+` (aggregate_id, sequence, event_id) VALUES ($1, $2, $3)`,
			e.AggregateID, e.Sequence, e.ID.String())
		return err
	}
}

type hijackKey struct{}

// hijackingWriter closes the connection instead of answering when the
// decision hook asked for it: the effect committed, and QStash sees a
// failed attempt.
type hijackingWriter struct {
	http.ResponseWriter
	hijack *bool
	gone   bool
}

func (w *hijackingWriter) WriteHeader(code int) {
	if *w.hijack && !w.gone {
		if conn, _, err := http.NewResponseController(w.ResponseWriter).Hijack(); err == nil {
			fmt.Fprintln(os.Stdout, "hijack")
			_ = conn.Close()
			w.gone = true
			return
		}
	}
	if !w.gone {
		w.ResponseWriter.WriteHeader(code)
	}
}

func (w *hijackingWriter) Write(b []byte) (int, error) {
	if w.gone {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}
