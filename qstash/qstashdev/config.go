package qstashdev

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/logs"
	"github.com/outboxkit/outboxkit/internal/qregion"
)

// The credentials and address of Upstash's official local dev server. Tools
// and SDKs that target "QStash on localhost" expect these values, so New uses
// them unless Config says otherwise.
const (
	// DefaultAddr is the address the official dev server listens on.
	DefaultAddr = "127.0.0.1:8080"
	// DefaultToken is the bearer token the official dev server accepts.
	DefaultToken = "eyJVc2VySUQiOiJkZWZhdWx0VXNlciIsIlBhc3N3b3JkIjoiZGVmYXVsdFBhc3N3b3JkIn0="
	// DefaultCurrentSigningKey signs deliveries until the keys are rotated.
	DefaultCurrentSigningKey = "sig_7kYjw48mhY7kAjqNGcy6cr29RJ6r"
	// DefaultNextSigningKey becomes the current key at the first rotation.
	DefaultNextSigningKey = "sig_5ZB6DVzB1wjE8S6rZ7eenA8Pdnhs"
)

// Config configures a Server. The zero value is usable: every field says its
// default.
type Config struct {
	// Token is the bearer token every API request must carry (header
	// "Authorization: Bearer <token>" or query parameter qstash_token).
	// Defaults to DefaultToken, which is public: Serve and ListenAndServe
	// then refuse addresses other than loopback.
	Token string
	// CurrentSigningKey signs every delivery. Defaults to
	// DefaultCurrentSigningKey.
	CurrentSigningKey string
	// NextSigningKey is announced by GET /v2/keys and becomes current on
	// rotation. Defaults to DefaultNextSigningKey. It must differ from
	// CurrentSigningKey, or a rotation would change nothing.
	NextSigningKey string
	// Region is the QStash region this server plays: EU_CENTRAL_1 or
	// US_EAST_1 (dashes and lower case are read too). Deliveries carry it
	// as Upstash-Region ("EU-CENTRAL-1"), which receivers use to pick that
	// region's signing keys. QStash's regions are independent, each with
	// its own token, signing keys, messages and DLQ: to test a receiver of
	// several regions, run one Server per region with keys of its own.
	// Defaults to EU_CENTRAL_1, QStash's default region.
	Region string

	// MaxBodyBytes bounds a message body; a larger publish is answered 413,
	// and a larger batch element gets an error element. It mirrors QStash's
	// per-plan message size limit. Defaults to 1 MiB.
	MaxBodyBytes int64
	// Concurrency is the number of delivery attempts in flight at once,
	// across all destinations. The server runs this many worker goroutines
	// (no goroutine per message), and the default client keeps as many idle
	// connections per host. More workers help with slow destinations; on
	// loopback, more than a few per core only add lock contention. Defaults
	// to 32.
	Concurrency int
	// Client sends deliveries. Its CheckRedirect is replaced so redirects
	// are never followed (QStash treats a 3xx as a failed attempt). Defaults
	// to a client with its own transport, sized for Concurrency and without
	// transparent compression, so bodies arrive as sent.
	Client *http.Client
	// Timeout bounds one delivery attempt when the message does not set
	// Upstash-Timeout. QStash's own default is the plan's maximum (minutes);
	// a local server is better off failing a hung endpoint sooner. Defaults
	// to 30s.
	Timeout time.Duration
	// MaxResponseBytes bounds how much of a destination's response body is
	// kept for callbacks and the DLQ; the rest is read and discarded so the
	// connection can be reused. Defaults to 256 KiB.
	MaxResponseBytes int64

	// Backoff is the delay before retry n (n >= 1) when the failed response
	// carries no Retry-After and the message has no Upstash-Retry-Delay.
	// Defaults to QStash's min(86400, e^(2.5n)) seconds: 12s, 2m28s, 30m8s,
	// 6h7m, then 24h.
	Backoff func(n int) time.Duration
	// BackoffScale multiplies every retry delay: the Backoff result, the
	// Upstash-Retry-Delay result and a Retry-After hint (after its one-day
	// cap). Tests set it to 0.001 so 12s becomes 12ms. It does not touch
	// Upstash-Delay or Upstash-Not-Before, which are the publisher's
	// schedule rather than the server's policy. Defaults to 1.
	BackoffScale float64
	// Clock is the time source for scheduling (delays, not-before, retries,
	// flow-control rate windows), deduplication windows, timestamps and JWT
	// claims. Tests pass a fake clock to move time instead of sleeping.
	// Attempt timeouts use real time: they guard real network calls.
	// Defaults to the system clock.
	Clock Clock

	// DeduplicationWindow is how long a deduplication ID is remembered.
	// Defaults to 10 minutes, as in QStash.
	DeduplicationWindow time.Duration
	// MaxDeduplicationKeys bounds the deduplication index; beyond it the
	// oldest keys are forgotten before their window ends. At 20,000
	// messages a second a 10-minute window would hold 12 million keys, which
	// a dev server should not. Defaults to 100,000.
	MaxDeduplicationKeys int
	// MaxEvents bounds the event log (GET /v2/events); the oldest events are
	// dropped first, so a long benchmark does not grow memory without bound.
	// Defaults to 10,000.
	MaxEvents int
	// MaxDLQ bounds the dead-letter queue; the oldest entries are dropped
	// first. QStash keeps entries for days; a dev server needs a bound
	// instead. Defaults to 10,000.
	MaxDLQ int
	// MaxDLQBytes bounds the bytes the dead-letter queue holds: each
	// entry's body and headers plus its last response's body and headers.
	// The oldest entries are dropped first, and the newest is always kept.
	// MaxDLQ alone would let 10,000 maximal messages hold over 10 GiB.
	// Defaults to 64 × MaxBodyBytes (64 MiB).
	MaxDLQBytes int64

	// MaxPendingMessages bounds the messages not yet delivered, failed or
	// cancelled: delayed, queued, waiting for flow control, retrying or in
	// flight, callbacks included. A publish, enqueue or batch that would
	// go beyond it is refused whole with 429, a JSON error and
	// Retry-After: 1, so a publisher backs off as it does for QStash's
	// quotas; nothing within the bound is refused. Callbacks are never
	// refused, but count. Defaults to 200,000.
	MaxPendingMessages int
	// MaxPendingBytes bounds the bytes those messages hold (body,
	// destination URL, headers and option strings; a URL-group publish
	// counts once per endpoint), refused in the same way. A dev server left running under a load test, or fed delayed
	// messages, would otherwise grow its heap by every byte published.
	// Defaults to 64 × MaxBodyBytes (64 MiB); it must not be below
	// MaxBodyBytes.
	MaxPendingBytes int64
	// MaxQueues bounds the queues, which enqueue creates on first use and
	// which outlive their messages; beyond it a new queue is refused with
	// 412, QStash's answer to its plans' queue limits. Defaults to 1,000.
	MaxQueues int
	// MaxURLGroups bounds the URL groups in the same way (412). Each group
	// holds at most 1,000 endpoints. Defaults to 1,000.
	MaxURLGroups int
	// MaxSchedules bounds the schedules in the same way (412). Defaults to
	// 1,000.
	MaxSchedules int

	// AllowedOrigins lists the origins (scheme://host[:port], such as
	// http://localhost:3000) whose browser pages may call the API besides
	// the server's own; they get the CORS answers a page needs. Any other
	// Origin is refused with 403, because the default token is public and
	// any page could otherwise publish through a developer's server.
	// Requests without Origin (SDKs, curl, relays) are not affected.
	// Defaults to none.
	AllowedOrigins []string

	// Reject, when set, sees every authenticated API request before it is
	// handled; a non-nil Rejection is answered instead. It lets tests
	// simulate QStash's 429 quota and burst limits (see RateLimited and
	// BurstRateLimited) or any other error status. It must not read the
	// request body.
	Reject func(r *http.Request) *Rejection

	// Logger receives server errors. Defaults to slog.Default() at warn
	// level, so a server that cannot serve says why.
	Logger *slog.Logger
}

// Clock is the time source of a Server: core.Clock, so the relay's clock
// and coretest.FakeClock plug in unchanged. A fake clock lets tests trigger
// delayed deliveries and retries without sleeping.
type Clock = core.Clock

// Timer is the part of *time.Timer a Clock hands out.
type Timer = core.Timer

// SystemClock is the Clock of the operating system.
type SystemClock = core.SystemClock

// QStashBackoff is QStash's default delay before retry n: min(86400, e^(2.5n))
// seconds.
func QStashBackoff(n int) time.Duration {
	s := math.Min(86400, math.Exp(2.5*float64(n)))
	return time.Duration(s * float64(time.Second))
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Token == "" {
		c.Token = DefaultToken
	}
	if c.CurrentSigningKey == "" {
		c.CurrentSigningKey = DefaultCurrentSigningKey
	}
	if c.NextSigningKey == "" {
		c.NextSigningKey = DefaultNextSigningKey
	}
	if c.Region == "" {
		c.Region = qregion.EUCentral1
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 1 << 20
	}
	if c.Concurrency == 0 {
		c.Concurrency = 32
	}
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Second
	}
	if c.MaxResponseBytes == 0 {
		c.MaxResponseBytes = 256 << 10
	}
	if c.Backoff == nil {
		c.Backoff = QStashBackoff
	}
	if c.BackoffScale == 0 {
		c.BackoffScale = 1
	}
	if c.Clock == nil {
		c.Clock = SystemClock{}
	}
	if c.DeduplicationWindow == 0 {
		c.DeduplicationWindow = 10 * time.Minute
	}
	if c.MaxDeduplicationKeys == 0 {
		c.MaxDeduplicationKeys = 100_000
	}
	if c.MaxEvents == 0 {
		c.MaxEvents = 10_000
	}
	if c.MaxDLQ == 0 {
		c.MaxDLQ = 10_000
	}
	if c.MaxDLQBytes == 0 {
		c.MaxDLQBytes = timesBodies(64, c.MaxBodyBytes)
	}
	if c.MaxPendingMessages == 0 {
		c.MaxPendingMessages = 200_000
	}
	if c.MaxPendingBytes == 0 {
		c.MaxPendingBytes = timesBodies(64, c.MaxBodyBytes)
	}
	if c.MaxQueues == 0 {
		c.MaxQueues = 1_000
	}
	if c.MaxURLGroups == 0 {
		c.MaxURLGroups = 1_000
	}
	if c.MaxSchedules == 0 {
		c.MaxSchedules = 1_000
	}
	if c.Logger == nil {
		c.Logger = logs.OrDefault(nil)
	}
	return c
}

// timesBodies is n maximal bodies in bytes, saturating instead of
// overflowing, and 0 (left for validate to report) for a negative size.
func timesBodies(n, maxBody int64) int64 {
	if maxBody <= 0 {
		return 0
	}
	if maxBody > math.MaxInt64/n {
		return math.MaxInt64
	}
	return n * maxBody
}

func (c Config) validate() error {
	var errs []error
	if _, ok := qregion.Normalize(c.Region); !ok {
		errs = append(errs, fmt.Errorf("Region %q is not a QStash region: use %s", c.Region, strings.Join(qregion.All, " or ")))
	}
	if c.CurrentSigningKey == c.NextSigningKey {
		errs = append(errs, errors.New("CurrentSigningKey and NextSigningKey are equal: give NextSigningKey a different value (or leave both empty for the dev-server defaults)"))
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"MaxBodyBytes", c.MaxBodyBytes},
		{"Concurrency", int64(c.Concurrency)},
		{"Timeout", int64(c.Timeout)},
		{"MaxResponseBytes", c.MaxResponseBytes},
		{"DeduplicationWindow", int64(c.DeduplicationWindow)},
		{"MaxDeduplicationKeys", int64(c.MaxDeduplicationKeys)},
		{"MaxEvents", int64(c.MaxEvents)},
		{"MaxDLQ", int64(c.MaxDLQ)},
		{"MaxDLQBytes", c.MaxDLQBytes},
		{"MaxPendingMessages", int64(c.MaxPendingMessages)},
		{"MaxPendingBytes", c.MaxPendingBytes},
		{"MaxQueues", int64(c.MaxQueues)},
		{"MaxURLGroups", int64(c.MaxURLGroups)},
		{"MaxSchedules", int64(c.MaxSchedules)},
	} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("%s is negative: use a positive value, or 0 for the default", f.name))
		}
	}
	if _, err := parseAllowedOrigins(c.AllowedOrigins); err != nil {
		errs = append(errs, err)
	}
	if c.MaxPendingBytes > 0 && c.MaxPendingBytes < c.MaxBodyBytes {
		errs = append(errs, fmt.Errorf("MaxPendingBytes %d is below MaxBodyBytes %d, so a message of the largest size could never be accepted: raise MaxPendingBytes, or leave it 0 for 64 × MaxBodyBytes", c.MaxPendingBytes, c.MaxBodyBytes))
	}
	if c.BackoffScale < 0 || math.IsNaN(c.BackoffScale) || math.IsInf(c.BackoffScale, 0) {
		errs = append(errs, fmt.Errorf("BackoffScale %v is not a finite positive number: use e.g. 0.001 in tests, or 0 for 1", c.BackoffScale))
	}
	return errors.Join(errs...)
}

// Rejection is an error answer injected through Config.Reject.
type Rejection struct {
	// Status is the HTTP status. Defaults to 429.
	Status int
	// Header is added to the answer (rate-limit headers, say).
	Header http.Header
	// Message is the "error" field of the JSON body. Defaults to the status
	// text.
	Message string
}

// RateLimited returns the 429 QStash answers when the daily quota is spent:
// RateLimit-Limit, RateLimit-Remaining (0) and RateLimit-Reset (unix seconds
// when the quota resets).
func RateLimited(limit int, reset time.Time) *Rejection {
	h := http.Header{}
	h.Set("RateLimit-Limit", fmt.Sprint(limit))
	h.Set("RateLimit-Remaining", "0")
	h.Set("RateLimit-Reset", fmt.Sprint(reset.Unix()))
	return &Rejection{Status: http.StatusTooManyRequests, Header: h, Message: "daily quota exceeded"}
}

// BurstRateLimited returns the 429 QStash answers when the per-second burst
// limit is hit: Burst-RateLimit-Limit, Burst-RateLimit-Remaining (0) and
// Burst-RateLimit-Reset (unix seconds).
func BurstRateLimited(limit int, reset time.Time) *Rejection {
	h := http.Header{}
	h.Set("Burst-RateLimit-Limit", fmt.Sprint(limit))
	h.Set("Burst-RateLimit-Remaining", "0")
	h.Set("Burst-RateLimit-Reset", fmt.Sprint(reset.Unix()))
	return &Rejection{Status: http.StatusTooManyRequests, Header: h, Message: "burst rate limit exceeded"}
}
