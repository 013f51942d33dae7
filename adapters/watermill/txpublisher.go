package outboxwatermill

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/outboxkit/outboxkit/core"
)

// Adder is the write side of an outbox store: it adds events within the
// caller's transaction, of whatever type the store takes. *postgres.Store
// satisfies Adder[postgres.DBTX], so this package need not import the store.
type Adder[TTx any] interface {
	Add(ctx context.Context, tx TTx, events ...core.Event) error
}

// AdderFunc adapts a function to an Adder. It is how a store whose write side
// has no transaction (memory.Store) becomes an Adder:
//
//	adder := outboxwatermill.AdderFunc[struct{}](func(ctx context.Context, _ struct{}, events ...core.Event) error {
//		return store.Add(ctx, events...)
//	})
type AdderFunc[TTx any] func(ctx context.Context, tx TTx, events ...core.Event) error

// Add calls f.
func (f AdderFunc[TTx]) Add(ctx context.Context, tx TTx, events ...core.Event) error {
	return f(ctx, tx, events...)
}

// TxPublisherConfig configures a TxPublisher. The zero value is usable.
type TxPublisherConfig struct {
	// EventID picks the ID of the event written for a message published on
	// topic. Defaults to DefaultEventID: the message UUID when it is a UUID,
	// else a new UUID v7. Set it to FreshEventID when one message (one
	// UUID) is published to several topics, as msg.Copy() fan-out does: the
	// outbox keys events by ID alone, so each UUID can be written once.
	// Whenever the ID is not the message UUID, the UUID is kept in the
	// HeaderMessageUUID header and consumers get it back as the message
	// UUID.
	EventID func(topic string, msg *message.Message) core.ID

	// EventType names the event written for a message published on topic.
	// Defaults to DefaultEventType: the message's ce-type metadata, else the
	// topic.
	EventType func(topic string, msg *message.Message) string

	// Source is the event Source (CloudEvents ce-source) for messages
	// without ce-source metadata. Defaults to none.
	Source string

	// WrapNonJSON stores a payload that is not valid JSON as a JSON string
	// holding its base64 encoding, marked with the HeaderPayloadEncoding
	// header; Publisher and the subscribers unwrap it, so Watermill consumers
	// get the original bytes back. Defaults to false: such a message is
	// refused with an error matching ErrNonJSONPayload, because consumers
	// outside Watermill (a QStash endpoint, a service in another language)
	// see the stored payload as it is, and a silently re-encoded one would
	// surprise them. Turn it on for Watermill-to-Watermill traffic only.
	WrapNonJSON bool

	// BeforeAdd, when set, is called on each event before it is validated
	// and added, with the Context of the message it was made from, the way
	// postgres.Config.BeforeAdd is called by the store. Set it to
	// tracing.NewInjector() so that each event carries its message's trace
	// context: it replaces the trace metadata the message may carry, and
	// keeps that metadata when the context has none. Defaults to nil: the
	// events carry the message's metadata only, traceparent included.
	//
	// A store whose own BeforeAdd injects (postgres.Config) sees the
	// Context of the Publish call's first message for every event of the
	// call, and has the last word.
	BeforeAdd func(ctx context.Context, e *core.Event)
}

// TxPublisher is a Watermill message.Publisher that writes messages into the
// outbox within one transaction, the way watermill-sql's publisher does: make
// one per transaction, hand it to code that publishes through Watermill, and
// the messages commit or roll back with the transaction's other writes. The
// relay delivers them afterwards.
//
// Each Publish call writes all its messages with one Add (one round trip on
// PostgreSQL), under the Context of its first message: set it with
// msg.SetContext so the write honours your request's deadline. Publish calls
// are serialised, because database transactions (pgx.Tx) are not safe for
// concurrent use while Watermill requires Publish to be.
//
// See the package documentation for how a message becomes an event.
type TxPublisher struct {
	add func(ctx context.Context, events []core.Event) error
	cfg TxPublisherConfig

	mu     sync.Mutex
	closed bool
}

var _ message.Publisher = (*TxPublisher)(nil)

// NewTxPublisher returns a publisher that writes into the outbox through
// adder within tx. cfg may be nil. Passing a connection pool instead of a
// transaction makes each Publish its own transaction, which suits tests and
// code that has no transaction to join.
func NewTxPublisher[TTx any](adder Adder[TTx], tx TTx, cfg *TxPublisherConfig) (*TxPublisher, error) {
	if adder == nil {
		return nil, &core.ConfigError{Field: "adder", Reason: "is nil: pass the outbox store (for example a *postgres.Store)"}
	}
	if any(tx) == nil {
		return nil, &core.ConfigError{Field: "tx", Reason: "is nil: pass the transaction the messages must commit with"}
	}
	var c TxPublisherConfig
	if cfg != nil {
		c = *cfg
	}
	if c.EventType == nil {
		c.EventType = DefaultEventType
	}
	if c.EventID == nil {
		c.EventID = DefaultEventID
	}
	return &TxPublisher{
		add: func(ctx context.Context, events []core.Event) error { return adder.Add(ctx, tx, events...) },
		cfg: c,
	}, nil
}

// DefaultEventID is the default TxPublisherConfig.EventID: the message UUID
// when it parses as a UUID, else (Watermill allows any string, a ULID say) a
// new UUID v7.
func DefaultEventID(_ string, msg *message.Message) core.ID {
	if id, err := core.ParseID(msg.UUID); err == nil && !id.IsZero() {
		return id
	}
	return core.NewID()
}

// FreshEventID gives every event a new UUID v7, whatever the message UUID:
// use it (as TxPublisherConfig.EventID) when a message is published to
// several topics under one UUID. UUID v7 also keeps the outbox's primary-key
// index compact, which Watermill's random (v4) UUIDs do not.
func FreshEventID(string, *message.Message) core.ID { return core.NewID() }

// DefaultEventType is the default TxPublisherConfig.EventType: the message's
// ce-type metadata when set, else the topic.
func DefaultEventType(topic string, msg *message.Message) string {
	if t := metadataFold(msg.Metadata, core.HeaderType); t != "" {
		return t
	}
	return topic
}

// Publish writes messages as events bound for topic (their Destination), all
// or none. It refuses the whole call, writing nothing, when any message
// cannot become a valid event.
func (p *TxPublisher) Publish(topic string, messages ...*message.Message) error {
	if topic == "" {
		return fmt.Errorf("outboxwatermill: publish: empty topic: every event needs a destination")
	}
	if len(messages) == 0 {
		return nil
	}
	events := make([]core.Event, len(messages))
	for i, msg := range messages {
		e, err := p.toEvent(topic, msg)
		if err != nil {
			return fmt.Errorf("outboxwatermill: publish message %s on topic %q: %w", msg.UUID, topic, err)
		}
		events[i] = e
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	if err := p.add(messages[0].Context(), events); err != nil {
		return fmt.Errorf("outboxwatermill: add %d event(s) to the outbox: %w", len(events), err)
	}
	return nil
}

// Close makes later Publish calls fail with ErrClosed. It neither commits nor
// rolls back the transaction: that stays the caller's.
func (p *TxPublisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	return nil
}

// toEvent maps one message to an event (see the package documentation).
func (p *TxPublisher) toEvent(topic string, msg *message.Message) (core.Event, error) {
	e := core.Event{Destination: topic, SchemaVersion: 1, Source: p.cfg.Source}
	e.ID = p.cfg.EventID(topic, msg)
	e.Type = p.cfg.EventType(topic, msg)

	headers := make(map[string]string, len(msg.Metadata))
	prefixed := make(map[string]string)
	for k, v := range msg.Metadata {
		lk := strings.ToLower(k)
		switch {
		case lk == core.HeaderSource:
			if v != core.DefaultSource {
				e.Source = v
			}
		case lk == core.HeaderSubject:
			e.AggregateID = v
		case lk == core.HeaderAggregateType:
			e.AggregateType = v
		case lk == core.HeaderSchemaVersion:
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return core.Event{}, &core.ValidationError{EventID: e.ID, Field: "SchemaVersion",
					Reason: fmt.Sprintf("metadata %s is %q; want a non-negative integer", core.HeaderSchemaVersion, v)}
			}
			e.SchemaVersion = n
		case lk == core.HeaderType, lk == core.HeaderID, lk == core.HeaderSpecVersion, lk == core.HeaderTime,
			lk == core.HeaderSequence, lk == core.HeaderContentType, ownHeader(lk),
			ownHeader(strings.TrimPrefix(lk, core.HeaderCustomPrefix)):
			// The type is EventType's to read; the ID is the message UUID;
			// time and sequence are the store's to assign for this new row.
		case strings.HasPrefix(lk, core.HeaderCustomPrefix) && len(k) > len(core.HeaderCustomPrefix):
			// A message consumed from an outbox and published on: undo the
			// prefix MessageFromEvent kept.
			prefixed[k[len(core.HeaderCustomPrefix):]] = v
		default:
			headers[k] = v
		}
	}
	for k, v := range prefixed {
		headers[k] = v
	}

	payload, wrapped, err := wrapPayload(msg.Payload, p.cfg.WrapNonJSON)
	if err != nil {
		return core.Event{}, &core.ValidationError{EventID: e.ID, Field: "Payload", Err: err,
			Reason: "is not valid JSON: the outbox stores JSON, so marshal the payload as JSON (or set TxPublisherConfig.WrapNonJSON for Watermill-only traffic)"}
	}
	e.Payload = payload
	if wrapped {
		headers[HeaderPayloadEncoding] = PayloadEncodingBase64
	}
	if msg.UUID != "" && msg.UUID != e.ID.String() {
		headers[HeaderMessageUUID] = msg.UUID
	}
	if len(headers) > 0 {
		e.Headers = headers
	}
	if p.cfg.BeforeAdd != nil {
		p.cfg.BeforeAdd(msg.Context(), &e)
	}
	if err := e.Validate(); err != nil {
		return core.Event{}, err
	}
	return e, nil
}

// metadataFold returns md[key], falling back to a case-insensitive match
// because transports that carry metadata as HTTP-style headers may
// canonicalise names (Ce-Type).
func metadataFold(md message.Metadata, key string) string {
	if v, ok := md[key]; ok {
		return v
	}
	for k, v := range md {
		if strings.EqualFold(k, key) {
			return v
		}
	}
	return ""
}
