package qstashsub

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	outboxwatermill "github.com/outboxkit/outboxkit/adapters/watermill"
	"github.com/outboxkit/outboxkit/adapters/watermill/internal/lifecycle"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/qstash"
)

// Config configures a Subscriber. The signing keys and URL are required;
// everything else says its default.
type Config struct {
	// CurrentSigningKey and NextSigningKey are QStash's signing keys
	// (QSTASH_CURRENT_SIGNING_KEY, QSTASH_NEXT_SIGNING_KEY). Required: an
	// empty key is refused, since it would verify tokens anyone can sign.
	CurrentSigningKey string
	NextSigningKey    string
	// URL is the endpoint's public URL exactly as publishers address it; the
	// signature's sub claim must equal it. Required.
	URL string
	// Topic maps a delivered event to the topic whose subscriptions receive
	// it. Defaults to the event's Type: an HTTP delivery does not carry the
	// event's Destination, which was the endpoint's URL anyway.
	Topic func(e core.Event) string
	// MaxBodyBytes bounds a delivery's body. Defaults to
	// qstash.DefaultMaxBodyBytes (1 MiB).
	MaxBodyBytes int64
	// Leeway is the clock skew tolerated on the signature's exp, nbf and
	// iat. Defaults to qstash.DefaultLeeway (5s).
	Leeway time.Duration
	// ReplayGuard refuses a signature token already accepted, so a captured
	// delivery cannot be sent again while its token is valid (see
	// qstash.ReceiverConfig.ReplayGuard). Defaults to a
	// qstash.NewMemoryReplayGuard for this subscriber; instances sharing a
	// URL should share one guard. It matters more here than for a
	// qstash.Receiver: the subscriber runs no Deduper of its own.
	ReplayGuard qstash.ReplayGuard
	// AllowBinaryMode accepts CloudEvents binary-mode deliveries, whose
	// attributes travel in headers QStash does not sign (see
	// qstash.ReceiverConfig.AllowBinaryMode). Defaults to false: the event,
	// and so the message's UUID and metadata, is read from the signed body
	// alone.
	AllowBinaryMode bool
	// CloseTimeout is how long, after Close, a delivery whose message was
	// already handed out still waits for its acknowledgement (Ack answers
	// 200); after that it is answered 500 and QStash redelivers it. Close
	// itself does not wait: the HTTP server's Shutdown waits for requests.
	// Defaults to 5s; a negative value answers them at once.
	CloseTimeout time.Duration
	// ContextFor, when set, derives each message's Context from the
	// request's context (which it must return, or a child of it) and the
	// event: set it to tracing.NewExtractor() so that the handler continues
	// the producer's trace from msg.Context(). Defaults to nil: the trace
	// context travels in the message's metadata (traceparent, tracestate,
	// baggage) alone.
	ContextFor func(ctx context.Context, e core.Event) context.Context
	// OnDecision learns the outcome of every request (see qstash.Decision).
	// Optional.
	OnDecision qstash.DecisionHook
	// Logger receives refused deliveries (Warn, rate-limited: anyone can
	// send them) and failed ones (Warn), as qstash.ReceiverConfig.Logger
	// describes. Defaults to slog.Default() at Warn and above, so a wrong
	// signing key or URL shows up in the service's own logs.
	Logger *slog.Logger
	// Clock tells the time for the signature checks and CloseTimeout.
	// Defaults to core.SystemClock.
	Clock core.Clock
}

// Subscriber is a Watermill message.Subscriber fed by QStash deliveries. It
// is also the http.Handler of the endpoint QStash delivers to: mount it at
// the path of Config.URL.
//
// Each request goes through qstash.Receiver, which refuses non-POSTs,
// oversized bodies, any request whose signature does not verify strictly
// and any token already accepted (a replay), and decodes the event from the
// signed body (a CloudEvents structured-mode document; binary mode only
// with AllowBinaryMode). The event becomes a message
// (outboxwatermill.MessageFromEvent: UUID = event ID) on the channel of its
// topic, and the request waits for it: Ack answers 200, Nack answers 500 so
// QStash retries with its backoff (Upstash-Retried counts the retries;
// qstash.DeliveryFromContext(msg.Context()) reads it). The request's
// context is the message's, so a delivery QStash gives up on (its timeout)
// cancels the message's context. A topic nobody subscribes to is answered
// 500 too, so its deliveries wait for a subscriber.
//
// Deduplication is the Watermill handler's job (QStash delivers at least
// once): the receiver runs with no Deduper of its own. Watermill has no
// "permanent" Nack, so a message that can never succeed should be acked
// after it is recorded elsewhere (Watermill's PoisonQueue middleware does
// that); a Nack makes QStash retry until its retries run out and the
// message lands in its DLQ.
//
// Subscriptions to one topic compete: each delivery goes to one of them.
// Messages are handed out as requests arrive, without waiting for earlier
// ones to be acknowledged; QStash's flow control (parallelism) is what
// bounds how many are in flight.
type Subscriber struct {
	receiver   *qstash.Receiver
	topic      func(core.Event) string
	contextFor func(context.Context, core.Event) context.Context
	grace      time.Duration
	clock      core.Clock
	subs       *lifecycle.Subscriptions

	mu     sync.Mutex
	topics map[string]*qstashTopic
}

// qstashTopic is where the deliveries of one topic meet its subscriptions.
type qstashTopic struct {
	deliveries chan *message.Message // unbuffered: a hand-off, never closed
	subs       int
	// idle is closed when subs drops to zero, so deliveries waiting for a
	// taker give up; a new one is made when a subscription arrives.
	idle chan struct{}
}

var (
	_ message.Subscriber = (*Subscriber)(nil)
	_ http.Handler       = (*Subscriber)(nil)
)

// New validates cfg and returns a subscriber. The error, matching
// core.ErrInvalidConfig, names the field to fix.
func New(cfg *Config) (*Subscriber, error) {
	if cfg == nil {
		return nil, &core.ConfigError{Field: "Config", Reason: "is nil: pass the signing keys and the endpoint URL"}
	}
	c := *cfg
	if c.Topic == nil {
		c.Topic = func(e core.Event) string { return e.Type }
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = 5 * time.Second
	}
	if c.Clock == nil {
		c.Clock = core.SystemClock{}
	}
	s := &Subscriber{
		topic:      c.Topic,
		contextFor: c.ContextFor,
		grace:      c.CloseTimeout,
		clock:      c.Clock,
		subs:       lifecycle.New(),
		topics:     make(map[string]*qstashTopic),
	}
	r, err := qstash.NewReceiver(&qstash.ReceiverConfig{
		CurrentSigningKey: c.CurrentSigningKey,
		NextSigningKey:    c.NextSigningKey,
		URL:               c.URL,
		Handler:           core.HandlerFunc(s.handle),
		Deduper:           passThrough{},
		Consumer:          "outboxwatermill",
		MaxBodyBytes:      c.MaxBodyBytes,
		Leeway:            c.Leeway,
		ReplayGuard:       c.ReplayGuard,
		AllowBinaryMode:   c.AllowBinaryMode,
		Clock:             c.Clock,
		Logger:            c.Logger,
		OnDecision:        c.OnDecision,
	})
	if err != nil {
		return nil, err
	}
	s.receiver = r
	return s, nil
}

// ServeHTTP handles one QStash delivery.
func (s *Subscriber) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.receiver.ServeHTTP(w, r)
}

// Subscribe returns the channel of topic's deliveries. It is closed once ctx
// is done or the subscriber is closed.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	return s.subs.Subscribe(ctx, topic, func(ctx context.Context, _ context.CancelFunc, out chan<- *message.Message) (func(), error) {
		t := s.join(topic)
		return func() {
			defer s.leave(t)
			for {
				select {
				case msg := <-t.deliveries:
					select {
					case out <- msg:
					case <-ctx.Done():
						// Taken but not handed out: have QStash redeliver it.
						msg.Nack()
						return
					}
				case <-ctx.Done():
					return
				}
			}
		}, nil
	})
}

// join counts a new subscription to topic and returns the topic.
func (s *Subscriber) join(topic string) *qstashTopic {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.topics[topic]
	if t == nil {
		t = &qstashTopic{deliveries: make(chan *message.Message)}
		s.topics[topic] = t
	}
	if t.subs == 0 {
		t.idle = make(chan struct{})
	}
	t.subs++
	return t
}

// leave counts a subscription to t out.
func (s *Subscriber) leave(t *qstashTopic) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.subs--; t.subs == 0 {
		close(t.idle)
	}
}

// Close ends every subscription and waits for their channels to close.
// Deliveries arriving afterwards are answered 500 (QStash retries them). It
// is idempotent.
func (s *Subscriber) Close() error {
	s.subs.Close()
	return nil
}

// handle is the receiver's handler: it hands the event to a subscription of
// its topic and waits for the acknowledgement.
func (s *Subscriber) handle(ctx context.Context, e core.Event) error {
	topic := s.topic(e)
	select {
	case <-s.subs.Closing():
		return outboxwatermill.ErrClosed
	default:
	}
	s.mu.Lock()
	t := s.topics[topic]
	if t == nil || t.subs == 0 {
		s.mu.Unlock()
		return fmt.Errorf("%w %q (event %s)", ErrNoSubscription, topic, e.ID)
	}
	idle := t.idle
	s.mu.Unlock()

	msg, err := outboxwatermill.MessageFromEvent(e)
	if err != nil {
		return core.Permanent(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if s.contextFor != nil {
		mctx = s.contextFor(mctx, e)
	}
	msg.SetContext(mctx)

	select {
	case t.deliveries <- msg:
	case <-idle:
		return fmt.Errorf("%w %q (event %s)", ErrNoSubscription, topic, e.ID)
	case <-s.subs.Closing():
		return outboxwatermill.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	return lifecycle.AwaitAck(ctx, msg, s.subs.Closing(), s.grace, s.clock)
}

// passThrough is a core.Deduper that runs every effect: the Watermill
// handler deduplicates, in its own transaction.
type passThrough struct{}

func (passThrough) Once(ctx context.Context, _ core.DedupeKey, effect func(context.Context) error) (bool, error) {
	if err := effect(ctx); err != nil {
		return false, err
	}
	return true, nil
}
