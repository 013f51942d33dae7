package dashboard

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/postgres"
)

// DefaultRedactHeaders is Config.RedactHeaders' default: header names that
// usually carry credentials.
var DefaultRedactHeaders = `(?i)(authori[sz]ation|cookie|token|secret|passw(or)?d|api[-_]?key|signature|credential|session|private)`

// Config configures the dashboard. Targets is required; every other field
// says its default.
type Config struct {
	// Targets are the outbox and inbox tables shown, each on its own
	// database pool. At least one.
	Targets []Target

	// Auth says who may use the dashboard. Its zero value lets in only
	// requests from loopback addresses (see Auth).
	Auth Auth

	// ReadOnly hides replay and purge and refuses every change. Defaults
	// to false.
	ReadOnly bool

	// BasePath is the path the handler is mounted under, as the browser
	// sees it ("/outbox" for a handler behind http.StripPrefix("/outbox",
	// h)); links and cookies use it. Defaults to "" (the root).
	BasePath string

	// RedactHeaders is a regular expression: event headers whose names
	// match it are shown as [redacted]. Defaults to DefaultRedactHeaders.
	RedactHeaders string

	// TraceURL links an event to its trace: {trace_id} is replaced by the
	// trace ID of the event's traceparent header (32 hex digits), e.g.
	// "http://jaeger.internal:16686/trace/{trace_id}". It must be an http
	// or https URL. Defaults to "" (no link).
	TraceURL string

	// RelayHealthURLs are the relays' /readyz URLs (outboxctl relay
	// --http-addr): the overview shows what each answers, retention
	// included. Defaults to none.
	RelayHealthURLs []string

	// HTTPClient fetches RelayHealthURLs. Defaults to a client with a 2 s
	// timeout.
	HTTPClient *http.Client

	// RefreshInterval is how often the overview page refreshes itself.
	// Defaults to 10 s.
	RefreshInterval time.Duration

	// PageSize is the number of events per page. Defaults to 50.
	PageSize int

	// ScanLimit bounds the rows one events page examines for its filters
	// (type, aggregate, destination, time). A page that reaches it before
	// finding PageSize matches says how far it searched and offers to
	// search on. Defaults to 10,000.
	ScanLimit int

	// DeadLetterLimit bounds the dead letters grouped on the dead-letter
	// page (the most recent first); group actions apply to the grouped
	// ones. Defaults to 20,000.
	DeadLetterLimit int

	// Logger receives the audit log (one line per change) and errors.
	// Defaults to slog.Default().
	Logger *slog.Logger
}

// Target is one outbox (or inbox) table.
type Target struct {
	// Pool is the database the table is in. Required.
	Pool *pgxpool.Pool
	// Name labels the database. Defaults to "dbname@host" from Pool's
	// configuration (never its password).
	Name string
	// Schema and Table name the table. Default "public" and
	// "outbox_events".
	Schema, Table string
	// Inbox marks an inbox table (postgres.Inbox): it is shown as one.
	Inbox bool
}

// Auth says who may use the dashboard. With none of Token, BasicUser or
// ProxyHeader set, only requests from a loopback address with a loopback
// Host are served (a page of another site cannot reach the dashboard
// through DNS rebinding), and CheckListen refuses a non-loopback address.
type Auth struct {
	// Token is a bearer token: requests carry "Authorization: Bearer
	// <Token>", or the session cookie the /login page sets after the
	// token was typed in (valid for 12 hours, and until Token changes).
	Token string
	// BasicUser and BasicPassword are HTTP basic-auth credentials; set
	// both or neither.
	BasicUser, BasicPassword string
	// ProxyHeader names the header an authenticating reverse proxy sets
	// to the user's name ("X-Forwarded-User"). It is trusted only from
	// TrustedProxies; a request without it is refused.
	ProxyHeader string
	// TrustedProxies are the addresses ProxyHeader is believed from.
	// Defaults to loopback (127.0.0.0/8 and ::1).
	TrustedProxies []netip.Prefix
}

// Enabled reports whether a an authentication method is set.
func (a Auth) Enabled() bool {
	return a.Token != "" || a.BasicUser != "" || a.ProxyHeader != ""
}

// Defaults applied by withDefaults.
const (
	defaultRefresh        = 10 * time.Second
	defaultPageSize       = 50
	defaultScanLimit      = 10_000
	defaultDeadLetterScan = 20_000
)

func (c Config) withDefaults() Config {
	if c.RedactHeaders == "" {
		c.RedactHeaders = DefaultRedactHeaders
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: 2 * time.Second}
	}
	if c.RefreshInterval == 0 {
		c.RefreshInterval = defaultRefresh
	}
	if c.PageSize == 0 {
		c.PageSize = defaultPageSize
	}
	if c.ScanLimit == 0 {
		c.ScanLimit = defaultScanLimit
	}
	if c.DeadLetterLimit == 0 {
		c.DeadLetterLimit = defaultDeadLetterScan
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if len(c.Auth.TrustedProxies) == 0 {
		c.Auth.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	}
	c.BasePath = strings.TrimRight(c.BasePath, "/")
	c.Targets = append([]Target(nil), c.Targets...)
	for i := range c.Targets {
		t := &c.Targets[i]
		if t.Schema == "" {
			t.Schema = postgres.DefaultSchema
		}
		if t.Table == "" {
			t.Table = postgres.DefaultTable
		}
		if t.Name == "" && t.Pool != nil {
			cc := t.Pool.Config().ConnConfig
			t.Name = cc.Database + "@" + cc.Host
		}
	}
	return c
}

// ConfigError is a configuration New refuses, with what to do about it.
type ConfigError struct {
	Field, Reason string
}

func (e *ConfigError) Error() string { return "outboxkit/dashboard: " + e.Field + " " + e.Reason }

func (c Config) validate() error {
	if len(c.Targets) == 0 {
		return &ConfigError{"Targets", "is empty: give at least one Target{Pool: pool} (public.outbox_events)"}
	}
	seen := map[string]bool{}
	for i, t := range c.Targets {
		if t.Pool == nil {
			return &ConfigError{fmt.Sprintf("Targets[%d].Pool", i), "is nil: pass the pool of the database the table is in"}
		}
		k := t.Name + "/" + t.Schema + "." + t.Table
		if seen[k] {
			return &ConfigError{fmt.Sprintf("Targets[%d]", i), fmt.Sprintf("repeats %s: list each table once", k)}
		}
		seen[k] = true
	}
	if (c.Auth.BasicUser == "") != (c.Auth.BasicPassword == "") {
		return &ConfigError{"Auth.BasicUser", "and Auth.BasicPassword go together: set both or neither"}
	}
	if strings.ContainsAny(c.Auth.BasicUser, ":") {
		return &ConfigError{"Auth.BasicUser", "contains ':', which basic auth cannot carry in a user name"}
	}
	if c.Auth.ProxyHeader != "" && http.CanonicalHeaderKey(c.Auth.ProxyHeader) == "Authorization" {
		return &ConfigError{"Auth.ProxyHeader", "is Authorization: name the header your proxy sets to the user (X-Forwarded-User)"}
	}
	if _, err := regexp.Compile(c.RedactHeaders); err != nil {
		return &ConfigError{"RedactHeaders", fmt.Sprintf("is not a regular expression (%v)", err)}
	}
	if c.TraceURL != "" {
		u, err := url.Parse(strings.ReplaceAll(c.TraceURL, traceIDPlaceholder, "0"))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return &ConfigError{"TraceURL", fmt.Sprintf("%q is not an http(s) URL: use e.g. http://jaeger:16686/trace/%s", c.TraceURL, traceIDPlaceholder)}
		}
		if !strings.Contains(c.TraceURL, traceIDPlaceholder) {
			return &ConfigError{"TraceURL", fmt.Sprintf("%q lacks %s, where the trace ID goes", c.TraceURL, traceIDPlaceholder)}
		}
	}
	for _, s := range c.RelayHealthURLs {
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return &ConfigError{"RelayHealthURLs", fmt.Sprintf("%q is not an http(s) URL: give the relay's /readyz, e.g. http://127.0.0.1:9090/readyz", s)}
		}
	}
	switch {
	case c.RefreshInterval < time.Second:
		return &ConfigError{"RefreshInterval", fmt.Sprintf("is %v: give at least 1s", c.RefreshInterval)}
	case c.PageSize < 1 || c.PageSize > 1000:
		return &ConfigError{"PageSize", fmt.Sprintf("is %d: give 1 to 1000", c.PageSize)}
	case c.ScanLimit < c.PageSize:
		return &ConfigError{"ScanLimit", fmt.Sprintf("is %d: give at least PageSize (%d)", c.ScanLimit, c.PageSize)}
	case c.DeadLetterLimit < 1:
		return &ConfigError{"DeadLetterLimit", "must be positive"}
	}
	if c.BasePath != "" && (!strings.HasPrefix(c.BasePath, "/") || strings.ContainsAny(c.BasePath, "?#\"'<> ")) {
		return &ConfigError{"BasePath", fmt.Sprintf("%q is not a path: use e.g. /outbox", c.BasePath)}
	}
	return nil
}

// errNotLoopback is what CheckListen returns.
var errNotLoopback = errors.New("not a loopback address")

// traceIDPlaceholder is where TraceURL takes the trace ID.
const traceIDPlaceholder = "{trace_id}"
