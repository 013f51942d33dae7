package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/outboxkit/outboxkit/core"
)

// Inbox is a consumer's inbox for handlers slower than the transport
// allows: the receiving side stores each verified delivery in the inbox
// table and answers the transport as soon as the row is committed, in one
// round trip; inbox workers apply the handler afterwards, with the relay's
// own machinery.
//
// The inbox table is an outbox table (same migrations, a Table of its own,
// "<Consumer>_inbox" by default) holding the events as they were
// delivered: same ID, type, payload, headers (trace context), aggregate
// and the producer's Sequence. Its primary key deduplicates deliveries by
// event ID, which is why there is one inbox per consumer. A worker is a
// core.Relay over the inbox table whose publisher is the handler
// (core.HandlerPublisher), run through the Deduper: leases, retries with
// backoff, dead letters after MaxAttempts (or at once for a Permanent
// error), per-aggregate order, the relay's hooks and metrics, and
// outboxctl's status, dlq, replay and prune (--table <inbox table>) all
// work as they do for an outbox.
//
// The promise is the outbox's: at least once into the inbox (a delivery
// answered 200 is committed), at least once from the inbox to the handler,
// and the effect exactly once through the Deduper, when the effect is a
// write in the Deduper's transaction.
//
// # Order
//
// With Store.Ordering on, a worker claims an aggregate's events one at a
// time in the producer's Sequence order: the ordered claim holds back any
// event while an event of its aggregate with a lower sequence is pending,
// and Accept writes the producer's sequences unchanged. That orders what
// has arrived. An event delivered before its predecessor (a transport
// retrying the predecessor, QStash without flow control) is not held back
// for a predecessor the inbox has not seen. To apply an aggregate's events
// strictly in order whatever the transport does, make Deduper a
// core.SequencedDeduper (a Sequencer on the inbox table): it retries an
// event whose predecessor has not been applied (core.ErrSequenceGap, with
// a RetryAfter hint the relay honours) and acknowledges stale ones without
// effect; the predecessor, once accepted, is claimable at once because
// nothing lower is pending. A gap retried past Relay.Retry.MaxAttempts is
// dead-lettered, for an operator to replay; set MaxAttempts (and the
// Sequencer's gap policy) for how long a predecessor may take.
//
// # Wiring
//
//	inbox, err := postgres.NewInbox(pool, &postgres.InboxConfig{
//		Consumer: "billing",
//		Store:    postgres.Config{Ordering: true},
//		Handler:  postgres.Effect(applyInvoice), // runs in the Deduper's transaction
//	})
//	// Migrate the inbox table once, like any outbox table:
//	err = postgres.Migrate(ctx, pool, &postgres.MigrateConfig{Table: inbox.Table()})
//	// Receiving: qstash.NewInboxReceiver(inbox, &qstash.ReceiverConfig{...}),
//	// or any transport that takes a core.Handler: inbox.Handle accepts.
//	// Working, in as many processes as you like:
//	err = inbox.Run(ctx)
//
// An Inbox is safe for concurrent use; any number of receivers and workers
// in any number of processes may share one inbox table.
type Inbox struct {
	store    *Store
	consumer string
	deduper  core.Deduper
	relay    *core.Relay // nil without a Handler

	// The accept statements, built once.
	acceptOne, acceptMany string
}

// NewInbox validates cfg and returns an Inbox on pool. It performs no I/O:
// run Migrate for the inbox's Schema and Table first.
func NewInbox[DB Handle](db DB, cfg *InboxConfig) (*Inbox, error) {
	if _, _, err := openHandle(db, "db"); err != nil {
		return nil, err
	}
	if cfg == nil {
		return nil, &core.ConfigError{Field: "InboxConfig", Reason: `is nil: pass at least the Consumer (e.g. "billing")`}
	}
	c := cfg.WithDefaults()
	if err := c.validate(*cfg); err != nil {
		return nil, err
	}
	store, err := New(db, &c.Store)
	if err != nil {
		return nil, err
	}
	if c.Deduper == nil {
		d, err := newDeduper(store.db, &DeduperConfig{Schema: c.Store.Schema, Table: c.Store.Table})
		if err != nil {
			return nil, err
		}
		c.Deduper = d
	}
	notify := c.Store.Notify == NotifyInTransaction
	in := &Inbox{
		store:      store,
		consumer:   c.Consumer,
		deduper:    c.Deduper,
		acceptOne:  acceptOneSQL(store.n, notify),
		acceptMany: acceptSQL(store.n, notify),
	}
	if c.Handler != nil {
		relay, err := core.NewRelay(store, in.Publisher(c.Handler), &c.Relay)
		if err != nil {
			return nil, err
		}
		in.relay = relay
	}
	return in, nil
}

// Publisher returns the worker's publisher for h: core.HandlerPublisher
// over h run through the inbox's Deduper under its Consumer
// (core.Idempotent). NewInbox uses it for InboxConfig.Handler; it is here
// for callers that build their own core.Relay over Store.
func (in *Inbox) Publisher(h core.Handler) core.Publisher {
	return core.HandlerPublisher(core.ChainHandler(h, core.Idempotent(in.deduper, in.consumer)))
}

// Consumer returns the consumer the inbox belongs to.
func (in *Inbox) Consumer() string { return in.consumer }

// Table returns the inbox table's name (unqualified), for Migrate and for
// outboxctl's --table.
func (in *Inbox) Table() string { return in.store.cfg.Table }

// Store returns the inbox table's store: what the workers claim from, and
// what operators read (Stats, DeadLetters, Replay, Prune).
func (in *Inbox) Store() *Store { return in.store }

// Relay returns the worker relay NewInbox built for InboxConfig.Handler, or
// nil when the Handler is nil (a process that only receives).
func (in *Inbox) Relay() *core.Relay { return in.relay }

// Run runs a worker until ctx is done (core.Relay.Run): it claims events
// from the inbox table and applies the handler. It fails at once, with an
// error matching core.ErrInvalidConfig, when InboxConfig.Handler was nil.
func (in *Inbox) Run(ctx context.Context) error {
	if in.relay == nil {
		return &core.ConfigError{Field: "Handler", Reason: "is nil: an Inbox without a Handler only receives; set InboxConfig.Handler to run workers"}
	}
	return in.relay.Run(ctx)
}

// Accept writes delivered events into the inbox, skipping those already
// there, in one statement on db (the pool, or the caller's transaction),
// and reports how many were new. See Store.Accept.
func (in *Inbox) Accept(ctx context.Context, db DBTX, events ...core.Event) (accepted int, err error) {
	return in.store.accept(ctx, db, in.acceptOne, in.acceptMany, events)
}

// Handle implements core.Handler for the receiving side: it accepts e into
// the inbox in a statement of its own, committed when Handle returns nil.
// A redelivery of an event already accepted returns nil too, so the
// transport stops redelivering. An event the inbox can never store (it
// fails validation) returns a Permanent error, so the transport gives up
// on it; a database failure returns a transient one.
//
// Any transport adapter that takes a core.Handler can deliver into the
// inbox through Handle. Behind qstash.Receiver, pair it with Deduper (or
// use qstash.NewInboxReceiver, which does).
func (in *Inbox) Handle(ctx context.Context, e core.Event) error {
	n, err := in.Accept(ctx, in.store.pool, e)
	if err != nil {
		var ve *core.ValidationError
		if errors.As(err, &ve) {
			return core.Permanent(fmt.Errorf("inbox %s: %w", in.consumer, err))
		}
		return fmt.Errorf("inbox %s: %w", in.consumer, err)
	}
	if n > 0 {
		in.store.Notify() // NotifyAfterCommit only; a no-op otherwise
	}
	if r, ok := ctx.Value(acceptReportKey{}).(*acceptReport); ok {
		r.handled, r.accepted = true, n > 0
	}
	return nil
}

// Deduper returns the core.Deduper to pair with the inbox behind a
// receiver that requires one (qstash.Receiver): the inbox table's primary
// key already deduplicates, so it opens no transaction and records
// nothing; it runs the effect and reports whether Handle wrote a new row
// (applied) or found the event already accepted (a duplicate). Paired with
// any other handler it fails the delivery (ErrNotInboxHandler) instead of
// applying an effect without deduplication.
func (in *Inbox) Deduper() core.Deduper { return receiveDeduper{} }

// ErrNotInboxHandler is returned by an Inbox's Deduper whose effect did not
// accept the event into an inbox: the Deduper records nothing itself, so
// it must be paired with the Inbox as the handler.
var ErrNotInboxHandler = errors.New("outboxkit/postgres: the inbox's Deduper ran an effect that did not accept the event into the inbox: pair Inbox.Deduper() with the Inbox itself as the handler")

// receiveDeduper is Inbox.Deduper.
type receiveDeduper struct{}

type acceptReportKey struct{}

// acceptReport is how Handle tells receiveDeduper what it did.
type acceptReport struct{ handled, accepted bool }

func (receiveDeduper) Once(ctx context.Context, key core.DedupeKey, effect func(ctx context.Context) error) (bool, error) {
	var r acceptReport
	if err := effect(context.WithValue(ctx, acceptReportKey{}, &r)); err != nil {
		return false, err
	}
	if !r.handled {
		return false, fmt.Errorf("event %s: %w", key.EventID, ErrNotInboxHandler)
	}
	return r.accepted, nil
}
