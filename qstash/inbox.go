package qstash

import (
	"strconv"

	"github.com/outboxkit/outboxkit/core"
)

// Inbox is where an inbox receiver stores deliveries (see NewInboxReceiver):
// a handler that accepts the event into an inbox table, the Deduper to run
// it through, and the consumer the inbox belongs to. postgres.Inbox
// implements it.
type Inbox interface {
	// Handle accepts the event into the inbox, committed when it returns
	// nil (nil too for an event already accepted).
	core.Handler
	// Deduper reports whether Handle wrote a new row (applied) or found
	// the event there (a duplicate).
	Deduper() core.Deduper
	// Consumer names the consumer.
	Consumer() string
}

// NewInboxReceiver returns a Receiver that stores each verified delivery
// in inbox and answers 200 as soon as the row is committed (one round
// trip), so a handler slower than QStash's timeout runs later, in the
// inbox's workers, instead of inside the delivery. Everything else is the
// Receiver's: signature verification, the ReplayGuard, body limits,
// structured mode, Middleware (tracing.HandlerMiddleware gives every
// delivery a consumer span) and OnDecision, whose OutcomeApplied now means
// "accepted into the inbox" and OutcomeDuplicate "already there".
//
// cfg's Handler and Deduper must be left nil, and Consumer empty or equal
// to inbox.Consumer(): the inbox provides them. An event the inbox cannot
// store answers 489 (QStash dead-letters it), a database failure 500
// (QStash retries). The handler's own errors happen in the workers, which
// retry, dead-letter and replay in the inbox table (postgres.Inbox).
//
//	inbox, _ := postgres.NewInbox(pool, &postgres.InboxConfig{Consumer: "billing", Handler: h})
//	rc, err := qstash.NewInboxReceiver(inbox, &qstash.ReceiverConfig{
//		CurrentSigningKey: os.Getenv("QSTASH_CURRENT_SIGNING_KEY"),
//		NextSigningKey:    os.Getenv("QSTASH_NEXT_SIGNING_KEY"),
//		URL:               "https://billing.example.com/qstash/orders",
//	})
//	http.Handle("/qstash/orders", rc)
//	go inbox.Run(ctx) // or in worker processes of their own
func NewInboxReceiver(inbox Inbox, cfg *ReceiverConfig) (*Receiver, error) {
	bad := func(field, reason string) error { return &core.ConfigError{Field: field, Reason: reason} }
	switch {
	case inbox == nil:
		return nil, bad("inbox", "is nil: pass the inbox (postgres.NewInbox) the receiver stores deliveries in")
	case cfg == nil:
		return nil, bad("ReceiverConfig", "is nil: pass the signing keys and the URL")
	case cfg.Handler != nil:
		return nil, bad("Handler", "is set: an inbox receiver's handler is the inbox; give your handler to the inbox's workers (postgres.InboxConfig.Handler)")
	case cfg.Deduper != nil:
		return nil, bad("Deduper", "is set: an inbox receiver deduplicates by the inbox table's key; give your Deduper to the inbox's workers (postgres.InboxConfig.Deduper)")
	case cfg.Consumer != "" && cfg.Consumer != inbox.Consumer():
		return nil, bad("Consumer", "is "+strconv.Quote(cfg.Consumer)+" but the inbox belongs to "+strconv.Quote(inbox.Consumer())+": leave it empty")
	}
	c := *cfg
	c.Handler, c.Deduper, c.Consumer = inbox, inbox.Deduper(), inbox.Consumer()
	return NewReceiver(&c)
}
