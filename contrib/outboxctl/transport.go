package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	amqp091 "github.com/rabbitmq/amqp091-go"

	outboxwatermill "github.com/outboxkit/outboxkit/adapters/watermill"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/qstash"
)

// Local defaults of the broker URLs: the services .ci/services.sh runs.
const (
	defaultNATSURL = "nats://127.0.0.1:4222"
	defaultAMQPURL = "amqp://guest:guest@127.0.0.1:5672/"
)

// preflightTimeout bounds the start-up check of the transport.
const preflightTimeout = 10 * time.Second

// transportFlags select and configure the relay's transport.
type transportFlags struct {
	kind string

	qstashURL, qstashToken string

	destination       string
	routesFile        string
	eventDestinations bool

	natsURL           string
	natsAutoProvision bool

	amqpURL string

	kafka kafkaFlags
}

func (t *transportFlags) register(fs *flagSet, getenv func(string) string) {
	fs.StringVar(&t.kind, "transport", "qstash", "`transport`: qstash, nats (JetStream), amqp or kafka")
	fs.StringVar(&t.qstashURL, "qstash-url", envOr(getenv, "QSTASH_URL", qstash.DefaultBaseURL), "QStash API `URL` (env QSTASH_URL)")
	fs.StringVar(&t.qstashToken, "qstash-token", getenv("QSTASH_TOKEN"), "QStash `token` (env QSTASH_TOKEN); required with --transport qstash")
	fs.StringVar(&t.destination, "destination", "",
		"where events go when neither their own destination column nor --routes says: a `URL` or URL group (qstash), or a topic (nats, amqp; default: the event type)")
	fs.StringVar(&t.routesFile, "routes", "", "`file` mapping event types to destinations: JSON {\"type\": \"destination\"} or type=destination lines")
	fs.BoolVar(&t.eventDestinations, "event-destinations", false,
		"qstash: route by each event's destination column alone (no --destination or --routes); events without one are dead-lettered")
	fs.StringVar(&t.natsURL, "nats-url", envOr(getenv, "NATS_URL", defaultNATSURL), "NATS `URL` (env NATS_URL)")
	fs.BoolVar(&t.natsAutoProvision, "nats-auto-provision", false,
		"nats: create a JetStream stream named after each topic when missing (topics must then be valid stream names: no dots)")
	fs.StringVar(&t.amqpURL, "amqp-url", envOr(getenv, "AMQP_URL", defaultAMQPURL), "AMQP `URL` (env AMQP_URL)")
	t.kafka.register(fs, getenv)
}

// connector makes the transport's core.Publisher, after checking that the
// service answers. probe tells later whether the service is still
// reachable (for /readyz), cheaply; close releases its connections; call
// it once the relay has stopped.
type connector func(ctx context.Context) (pub core.Publisher, probe func(context.Context) error, close func(), err error)

// fatalError is a start-up failure that waiting (--wait) cannot cure: a
// token the transport refuses, say.
type fatalError struct{ err error }

func (e fatalError) Error() string { return e.err.Error() }
func (e fatalError) Unwrap() error { return e.err }

// transport validates the transport flags without any I/O, so a mistake is
// reported before outboxctl connects anywhere, and returns the connector.
func (a *app) transport(t *transportFlags, logger *slog.Logger) (connector, error) {
	var routes map[string]route
	if t.routesFile != "" {
		var err error
		if routes, err = loadRoutes(t.routesFile); err != nil {
			return nil, err
		}
	}
	switch strings.ToLower(t.kind) {
	case "qstash":
		return a.qstashPublisher(t, routes)
	case "nats":
		return a.natsPublisher(t, routes, logger)
	case "amqp":
		return a.amqpPublisher(t, routes, logger)
	case "kafka":
		return a.kafkaPublisher(t, &t.kafka, routes)
	}
	return nil, usageError(fmt.Sprintf("--transport %q: use qstash, nats, amqp or kafka", t.kind))
}

func (a *app) qstashPublisher(t *transportFlags, routes map[string]route) (connector, error) {
	a.addSecret(t.qstashToken)
	a.addURLSecrets(t.qstashURL)
	if t.qstashToken == "" {
		return nil, usageError("--transport qstash needs a token: set --qstash-token or QSTASH_TOKEN (the Upstash console shows it; outboxctl qstash-dev prints a local one)")
	}
	if t.destination == "" && routes == nil && !t.eventDestinations {
		return nil, usageError("say where events go: --destination URL, --routes FILE, or --event-destinations when every event carries its own destination")
	}
	if t.eventDestinations && (t.destination != "" || routes != nil) {
		return nil, usageError("--event-destinations means no --destination and no --routes: events carrying a destination use it anyway")
	}
	cfg := &qstash.PublisherConfig{BaseURL: t.qstashURL, Token: t.qstashToken}
	if t.destination != "" {
		target, err := qstash.ParseTarget(t.destination)
		if err != nil {
			return nil, usageError(fmt.Sprintf("--destination: %v", err))
		}
		cfg.Destination = target
	}
	if routes != nil {
		cfg.Routes = make(map[string]qstash.Target, len(routes))
		for typ, r := range routes {
			var target qstash.Target
			switch r.Kind {
			case "url":
				target.URL = r.Destination
			case "urlGroup":
				target.URLGroup = r.Destination
			case "topic":
				return nil, usageError(fmt.Sprintf("--routes: %q routes to a topic, which QStash does not have: use url or urlGroup", typ))
			default:
				var err error
				if target, err = qstash.ParseTarget(r.Destination); err != nil {
					return nil, usageError(fmt.Sprintf("--routes: %q: %v", typ, err))
				}
			}
			target.Queue = r.Queue
			cfg.Routes[typ] = target
		}
	}
	// NewPublisher validates everything else (URL, queue names) without
	// I/O; the publisher itself is made again when connecting.
	probe, err := qstash.NewPublisher(cfg)
	if err != nil {
		return nil, usageError(qstashFlagError(err))
	}
	_ = probe.Close()
	return func(ctx context.Context) (core.Publisher, func(context.Context) error, func(), error) {
		if err := a.checkQStash(ctx, t, true); err != nil {
			return nil, nil, nil, err
		}
		pub, err := qstash.NewPublisher(cfg)
		if err != nil {
			return nil, nil, nil, usageError(qstashFlagError(err))
		}
		probe := func(ctx context.Context) error { return a.checkQStash(ctx, t, false) }
		return pub, probe, func() { _ = pub.Close() }, nil
	}, nil
}

// qstashFlagError names the flag behind a qstash.PublisherConfig error.
func qstashFlagError(err error) string {
	msg := trimLibPrefix(err.Error())
	for field, flag := range map[string]string{"BaseURL: ": "--qstash-url: ", "Token: ": "--qstash-token: ", "Destination: ": "--destination: ", "Routes": "--routes "} {
		if strings.HasPrefix(msg, field) {
			return flag + strings.TrimPrefix(msg, field)
		}
	}
	return msg
}

// checkQStash asks QStash for its signing keys: the cheapest authenticated
// request, so an unreachable server or a wrong token stops the relay at
// start instead of every publish failing and retrying in the logs. At start
// (starting) an unexpected answer is a warning; afterwards, as a readiness
// probe, a server error means QStash is not usable.
func (a *app) checkQStash(ctx context.Context, t *transportFlags, starting bool) error {
	ctx, cancel := context.WithTimeout(ctx, preflightTimeout)
	defer cancel()
	base := strings.TrimRight(t.qstashURL, "/")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v2/keys", nil)
	if err != nil {
		return usageError(fmt.Sprintf("--qstash-url %s: %v", displayURL(t.qstashURL), err))
	}
	req.Header.Set("Authorization", "Bearer "+t.qstashToken)
	client := &http.Client{Timeout: preflightTimeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach QStash at %s: %s — is it running? set --qstash-url or QSTASH_URL", displayURL(base), netCause(err))
	}
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return fatalError{fmt.Errorf("QStash at %s refused the token (%s): set --qstash-token or QSTASH_TOKEN to the token of the Upstash console", displayURL(base), resp.Status)}
	case resp.StatusCode >= 500 && !starting:
		return fmt.Errorf("QStash at %s answered %s", displayURL(base), resp.Status)
	case resp.StatusCode >= 300 && starting:
		a.warn("QStash at %s answered %s to GET /v2/keys; starting anyway", displayURL(base), resp.Status)
	}
	return nil
}

// topicFunc picks a Watermill topic: the event's destination column, its
// route, --destination, else its type (outboxwatermill.DefaultTopic).
func topicFunc(t *transportFlags, routes map[string]route) (func(core.Event) string, error) {
	if t.eventDestinations {
		return nil, usageError("--event-destinations is for --transport qstash: Watermill transports fall back to the event type as topic")
	}
	topics := make(map[string]string, len(routes))
	for typ, r := range routes {
		if r.Queue != "" || r.Kind == "url" || r.Kind == "urlGroup" {
			return nil, usageError(fmt.Sprintf("--routes: %q: queues, URLs and URL groups are QStash routes; with --transport %s give a topic", typ, t.kind))
		}
		topics[typ] = r.Destination
	}
	return func(e core.Event) string {
		if e.Destination != "" {
			return e.Destination
		}
		if topic, ok := topics[e.Type]; ok {
			return topic
		}
		if t.destination != "" {
			return t.destination
		}
		return e.Type
	}, nil
}

func (a *app) natsPublisher(t *transportFlags, routes map[string]route, logger *slog.Logger) (connector, error) {
	a.addURLSecrets(t.natsURL)
	topic, err := topicFunc(t, routes)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (core.Publisher, func(context.Context) error, func(), error) {
		nc, err := nats.Connect(t.natsURL, nats.Name("outboxctl relay"), nats.Timeout(preflightTimeout),
			// A relay outlives broker restarts: keep reconnecting; publishes
			// fail meanwhile and the relay retries them.
			nats.MaxReconnects(-1))
		if err != nil {
			return nil, nil, nil, fmt.Errorf("cannot reach NATS at %s: %s — is it running? set --nats-url or NATS_URL", displayURL(t.natsURL), netCause(err))
		}
		js, err := nc.JetStream()
		if err == nil {
			_, err = js.AccountInfo(nats.Context(ctx))
		}
		if err != nil {
			nc.Close()
			return nil, nil, nil, fmt.Errorf("NATS at %s has no usable JetStream (%v): start nats-server with -js", displayURL(t.natsURL), err)
		}
		wp, err := wmnats.NewPublisherWithNatsConn(nc, wmnats.PublisherPublishConfig{
			Marshaler:         &wmnats.NATSMarshaler{},
			SubjectCalculator: wmnats.DefaultSubjectCalculator,
			JetStream: wmnats.JetStreamConfig{
				AutoProvision: t.natsAutoProvision,
				// Nats-Msg-Id = event ID: JetStream drops a republished
				// event within its duplicate window.
				TrackMsgId: true,
			},
		}, watermill.NewSlogLogger(logger))
		if err != nil {
			nc.Close()
			return nil, nil, nil, fmt.Errorf("NATS JetStream at %s: %v", displayURL(t.natsURL), err)
		}
		// The connection reconnects by itself; its state is the probe.
		probe := func(context.Context) error {
			if st := nc.Status(); st != nats.CONNECTED {
				return fmt.Errorf("NATS at %s: connection %s", displayURL(t.natsURL), strings.ToLower(st.String()))
			}
			return nil
		}
		return watermillPublisher(wp, topic, probe)
	}, nil
}

func (a *app) amqpPublisher(t *transportFlags, routes map[string]route, logger *slog.Logger) (connector, error) {
	a.addURLSecrets(t.amqpURL)
	topic, err := topicFunc(t, routes)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (core.Publisher, func(context.Context) error, func(), error) {
		// Each topic is a durable fanout exchange of that name, declared on
		// first use; consumers bind their queues to it. Publisher confirms
		// make a publish count only once the broker has the message.
		cfg := wmamqp.NewDurablePubSubConfig(t.amqpURL, nil)
		cfg.Publish.ConfirmDelivery = true
		// The standard message-id property carries the event ID, so any
		// AMQP consumer (not only Watermill's) can deduplicate on it.
		cfg.Marshaler = wmamqp.DefaultMarshaler{PostprocessPublishing: func(p amqp091.Publishing) amqp091.Publishing {
			if id, ok := p.Headers[wmamqp.DefaultMessageUUIDHeaderKey].(string); ok {
				p.MessageId = id
			}
			p.ContentType = "application/json"
			return p
		}}
		wp, err := wmamqp.NewPublisher(cfg, watermill.NewSlogLogger(logger))
		if err != nil {
			return nil, nil, nil, fmt.Errorf("cannot reach AMQP at %s: %s — is it running? set --amqp-url or AMQP_URL", displayURL(t.amqpURL), netCause(err))
		}
		// The Watermill publisher hides its connection: the probe is
		// whether the broker accepts a TCP connection.
		probe := func(ctx context.Context) error {
			u, err := amqp091.ParseURI(t.amqpURL)
			if err != nil {
				return nil
			}
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(u.Host, strconv.Itoa(u.Port)))
			if err != nil {
				return fmt.Errorf("cannot reach AMQP at %s: %s", displayURL(t.amqpURL), netCause(err))
			}
			return c.Close()
		}
		return watermillPublisher(wp, topic, probe)
	}, nil
}

func watermillPublisher(wp message.Publisher, topic func(core.Event) string, probe func(context.Context) error) (core.Publisher, func(context.Context) error, func(), error) {
	pub, err := outboxwatermill.NewPublisher(wp, &outboxwatermill.PublisherConfig{Topic: topic})
	if err != nil {
		_ = wp.Close()
		return nil, nil, nil, err
	}
	return pub, probe, func() { _ = wp.Close() }, nil
}
