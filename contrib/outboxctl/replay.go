package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

const replayHelp = `Puts published and dead-lettered events matching every given criterion back
to pending, so relays deliver them again. Events keep their IDs (the
idempotency key), so a consumer that already applied one skips it; attempts
restart at 0. Pending and in-flight events are never touched.

  outboxctl replay --id 0190f1a2-...,0190f1a3-...      these events
  outboxctl replay --type order.confirmed --since 2025-01-31T14:00:00Z
  outboxctl replay --aggregate order/42                every event of one aggregate
  outboxctl replay --dead-only --type invoice.sent     dead letters of one type
  outboxctl replay --all                               everything published or dead

--aggregate takes TYPE/ID; "order/" matches every order, "/42" the ID 42 of
any type. --since is inclusive, --until exclusive, both on created_at.
At least one criterion (or --all) is required.

Transports that deduplicate on the event ID drop a replayed event published
shortly before: QStash for 10 minutes, NATS JetStream for its stream's
duplicate window (2 minutes by default). replay counts those events and
warns; --transport names the relays' transport (qstash, as for relay, by
default).`

// replayChunk bounds the IDs replayed per statement, so a long --id list
// shows progress and no statement holds thousands of row locks.
const replayChunk = 1000

func (a *app) cmdReplay(ctx context.Context, args []string) error {
	fs := a.newFlagSet("replay", "[--id ID,...] [--type TYPE,...] [--aggregate TYPE/ID] [--since T] [--until T] [--dead-only] [--all]", replayHelp)
	a.registerGlobals(fs)
	var ids, types listFlag
	fs.Var(&ids, "id", "event `IDs` to replay (repeatable, or comma-separated)")
	fs.Var(&types, "type", "event `types` to replay (repeatable, or comma-separated)")
	aggregate := fs.String("aggregate", "", "aggregate as `TYPE/ID` (\"order/42\"; \"order/\" for every order, \"/42\" for ID 42 of any type)")
	since := fs.String("since", "", "only events created at or after this RFC 3339 `time`")
	until := fs.String("until", "", "only events created before this RFC 3339 `time`")
	deadOnly := fs.Bool("dead-only", false, "only dead-lettered events (not published ones)")
	all := fs.Bool("all", false, "with no other criterion: replay every published and dead-lettered event")
	transport := fs.String("transport", "qstash", "the relays' `transport` (qstash, nats or amqp): replay warns about the events it will drop as duplicates")
	if err := a.parseFlags(fs, args); err != nil {
		return err
	}
	*transport = strings.ToLower(*transport)
	switch *transport {
	case "qstash", "nats", "amqp":
	default:
		return usageError(fmt.Sprintf("--transport %q: use qstash, nats or amqp, the transport your relays use", *transport))
	}
	f := core.ReplayFilter{Types: types, DeadOnly: *deadOnly, All: *all}
	var err error
	if f.IDs, err = parseIDs(ids); err != nil {
		return err
	}
	if *aggregate != "" {
		typ, id, ok := strings.Cut(*aggregate, "/")
		if !ok || (typ == "" && id == "") {
			return usageError(fmt.Sprintf("--aggregate %q: use TYPE/ID, e.g. order/42 (order/ for every order, /42 for ID 42 of any type)", *aggregate))
		}
		f.AggregateType, f.AggregateID = typ, id
	}
	if f.Since, err = parseTime("since", *since); err != nil {
		return err
	}
	if f.Until, err = parseTime("until", *until); err != nil {
		return err
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		return usageError("--until must be after --since")
	}
	if f.Empty() {
		return usageError("replay needs a criterion: --id, --type, --aggregate, --since, --until or --dead-only (or --all for every published and dead-lettered event)")
	}
	pool, store, err := a.openStore(ctx, 0, postgres.Config{})
	if err != nil {
		return err
	}
	defer pool.Close()
	var recent recentCount
	if window, _ := dedupWindow(*transport); window > 0 {
		// Counted before the replay clears published_at. A relay may
		// publish a matching event in between: the count is a floor.
		if recent, err = a.recentlyPublished(ctx, pool, f, window); err != nil {
			return err
		}
	}
	n, err := a.replay(ctx, store, f)
	if err != nil {
		return err
	}
	what := "published or dead-lettered"
	if f.DeadOnly {
		what = "dead-lettered"
	}
	fmt.Fprintf(a.stdout, "replayed %d %s event(s); IDs kept, so consumers skip those they already applied\n", n, what)
	a.warnDeduplicated(*transport, n, recent)
	return nil
}

// replay runs the filter, in chunks of IDs when it names IDs so a long
// list shows progress.
func (a *app) replay(ctx context.Context, store *postgres.Store, f core.ReplayFilter) (int64, error) {
	if len(f.IDs) <= replayChunk {
		p := a.startProgress("replaying", "events", 0)
		n, err := store.Replay(ctx, f)
		p.done()
		return n, a.dbError(err)
	}
	ids := f.IDs
	p := a.startProgress("replaying", "IDs", int64(len(ids)))
	defer p.done()
	var total int64
	for i := 0; i < len(ids); i += replayChunk {
		chunk := f
		chunk.IDs = ids[i:min(i+replayChunk, len(ids))]
		n, err := store.Replay(ctx, chunk)
		total += n
		if err != nil {
			return total, fmt.Errorf("after replaying %d event(s): %w", total, a.dbError(err))
		}
		p.set(int64(min(i+replayChunk, len(ids))))
	}
	return total, nil
}

// parseIDs reads event IDs, naming the first that is not a UUID.
func parseIDs(raw []string) ([]core.ID, error) {
	out := make([]core.ID, 0, len(raw))
	for _, s := range raw {
		id, err := core.ParseID(s)
		if err != nil {
			return nil, usageError(fmt.Sprintf("--id %q is not an event ID (a UUID such as 0190f1a2-7b3c-7d4e-8f90-a1b2c3d4e5f6)", s))
		}
		out = append(out, id)
	}
	return out, nil
}

// rfc3339 formats t in UTC, or "-" for the zero time.
func rfc3339(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
