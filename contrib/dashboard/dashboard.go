package dashboard

import (
	"crypto/rand"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/outboxkit/outboxkit/postgres"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// handler is the dashboard.
type handler struct {
	cfg     Config
	targets []*target
	log     *slog.Logger
	redact  *regexp.Regexp
	pages   map[string]*template.Template
	mux     *http.ServeMux
	auth    *authenticator
	csrf    *csrfGuard
	static  http.Handler
}

// target is one table with its store and statements.
type target struct {
	Target
	idx   int
	store *postgres.Store
	n     tableNames

	mu       sync.Mutex
	cached   *targetOverview
	cachedAt int64 // monotonic nanoseconds

	// The doctor's last cheap findings (doctor.go), guarded by mu.
	doctor        []postgres.Finding
	doctorAt      time.Time
	doctorRunning bool
}

// Idx is the target's index in Config.Targets, its t parameter.
func (t *target) Idx() int { return t.idx }

// Label is how pages name the table: database, schema and table.
func (t *target) Label() string {
	kind := "outbox"
	if t.Inbox {
		kind = "inbox"
	}
	return fmt.Sprintf("%s %s.%s (%s)", t.Name, t.Schema, t.Table, kind)
}

// New validates cfg and returns the dashboard's handler. It performs no
// I/O. Mount it at the root of a server (outboxctl dashboard does), or
// under a prefix with http.StripPrefix and Config.BasePath.
func New(cfg Config) (http.Handler, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	h := &handler{cfg: c, log: c.Logger, redact: regexp.MustCompile(c.RedactHeaders)}
	for i, t := range c.Targets {
		store, err := postgres.New(t.Pool, &postgres.Config{Schema: t.Schema, Table: t.Table})
		if err != nil {
			return nil, &ConfigError{fmt.Sprintf("Targets[%d]", i), err.Error()}
		}
		h.targets = append(h.targets, &target{Target: t, idx: i, store: store, n: newTableNames(t.Schema, t.Table)})
	}
	if err := h.parseTemplates(); err != nil {
		return nil, err
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	h.auth = newAuthenticator(c.Auth, c.BasePath)
	h.csrf = newCSRFGuard(key, c.BasePath)
	sub, err := fs.Sub(staticFiles, "static")
	if err != nil {
		return nil, err
	}
	h.static = http.StripPrefix("/static/", http.FileServerFS(sub))
	h.routes()
	return h, nil
}

func (h *handler) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", h.overviewPage)
	m.HandleFunc("GET /api/overview", h.overviewJSON)
	m.HandleFunc("GET /events", h.eventsPage)
	m.HandleFunc("GET /event", h.eventPage)
	m.HandleFunc("GET /deadletters", h.deadLettersPage)
	m.HandleFunc("GET /deadletters/group", h.groupPage)
	m.HandleFunc("POST /deadletters/confirm", h.confirmAction)
	m.HandleFunc("POST /deadletters/apply", h.applyAction)
	m.HandleFunc("GET /login", h.loginPage)
	m.HandleFunc("POST /login", h.login)
	m.HandleFunc("POST /logout", h.logout)
	m.Handle("GET /static/", h.static)
	h.mux = m
}

// ServeHTTP sets the security headers, authenticates, checks every
// change for CSRF and read-only mode, then routes.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	// same-origin, not no-referrer: with no-referrer browsers send
	// "Origin: null" on the dashboard's own forms, which the cross-origin
	// check must then refuse. Links out (Jaeger) carry no referrer.
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	hd.Set("Cross-Origin-Resource-Policy", "same-origin")
	if !isStatic(r) {
		hd.Set("Cache-Control", "no-store")
	}
	who, ok := h.auth.check(w, r)
	if !ok {
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		if err := h.csrf.check(r); err != nil {
			h.log.Warn("dashboard refused a change", "reason", err.Error(), "path", r.URL.Path, "remote", r.RemoteAddr)
			h.errorPage(w, r, http.StatusForbidden, "Refused: "+err.Error()+". Reload the dashboard's page and try again.")
			return
		}
		if h.cfg.ReadOnly && r.URL.Path != "/login" && r.URL.Path != "/logout" {
			h.errorPage(w, r, http.StatusForbidden, "This dashboard is read-only: replay and purge are turned off.")
			return
		}
	}
	r = r.WithContext(withWho(r.Context(), who))
	h.mux.ServeHTTP(w, r)
}

func isStatic(r *http.Request) bool {
	return len(r.URL.Path) > 8 && r.URL.Path[:8] == "/static/"
}

// targetFor reads the t parameter (a target's index), defaulting to the
// first.
func (h *handler) targetFor(r *http.Request) (*target, bool) {
	s := r.FormValue("t")
	if s == "" {
		return h.targets[0], true
	}
	i, err := strconv.Atoi(s)
	if err != nil || i < 0 || i >= len(h.targets) {
		return nil, false
	}
	return h.targets[i], true
}
