package qstashdev

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outboxkit/internal/qregion"
)

// ErrClosed is returned by WaitIdle and WaitFor once the server is shut down.
var ErrClosed = errors.New("qstashdev: server closed")

// Server is an in-memory QStash. Create it with New, expose its API with
// Handler (in-process, e.g. under httptest) or Serve/ListenAndServe (on an
// address), and stop it with Shutdown or Close, which end every goroutine it
// started.
type Server struct {
	cfg       Config
	clock     Clock
	client    *http.Client
	transport *http.Transport // ours to close; nil when Config.Client is set
	lan       *lanClient      // fast path for plain http; nil when Config.Client is set
	ids       *idSource
	log       *slog.Logger
	signer    atomic.Pointer[signer] // the current key's signer
	allowed   []originKey            // Config.AllowedOrigins, parsed
	dlqIDs    atomic.Uint64
	region    string // the Upstash-Region header of deliveries

	// ctx is cancelled by Close (or an expired Shutdown) to abort attempts
	// in flight.
	ctx     context.Context
	cancel  context.CancelFunc
	wake    chan struct{} // the timer heap has a new earliest entry
	stop    chan struct{} // closed when the scheduler must exit
	workers sync.WaitGroup
	sched   sync.WaitGroup
	once    sync.Once

	mu       sync.Mutex
	workCond *sync.Cond // ready list non-empty, or stopping
	stopping bool
	keys     SigningKeys
	messages map[string]*message
	pending  int // messages not yet delivered, failed or cancelled
	// pendingBytes is the size (messageSize) of those messages.
	pendingBytes int64
	inflight     int
	ready        deque[*message]
	timers       timerHeap
	timerSeq     uint64
	queues       map[string]*queue
	groups       map[string]*urlGroup
	schedules    map[string]*schedule
	flows        map[string]*flowKey
	urls         map[string]*url.URL // parsed destinations
	dedup        dedupIndex
	events       eventLog
	dlq          dlqStore
	idleCh       chan struct{} // closed when pending reaches 0; made on demand
	changed      chan struct{} // closed on any recorded change; made on demand
	servers      []*http.Server
}

// New returns a running server: its delivery workers and scheduler start
// now, so call Close (or Shutdown) when done.
func New(cfg Config) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("qstashdev: invalid config: %w", err)
	}
	s := &Server{
		cfg:       cfg,
		clock:     cfg.Clock,
		ids:       newIDSource(),
		log:       cfg.Logger,
		wake:      make(chan struct{}, 1),
		stop:      make(chan struct{}),
		keys:      SigningKeys{Current: cfg.CurrentSigningKey, Next: cfg.NextSigningKey},
		messages:  make(map[string]*message),
		queues:    make(map[string]*queue),
		groups:    make(map[string]*urlGroup),
		schedules: make(map[string]*schedule),
		flows:     make(map[string]*flowKey),
		urls:      make(map[string]*url.URL),
		dedup:     dedupIndex{entries: make(map[string]*dedupEntry), max: cfg.MaxDeduplicationKeys},
		events:    eventLog{buf: make([]Event, 0, min(cfg.MaxEvents, 1024)), max: cfg.MaxEvents},
		dlq:       dlqStore{byID: make(map[string]*dlqEntry), max: cfg.MaxDLQ, maxBytes: cfg.MaxDLQBytes},
	}
	s.allowed, _ = parseAllowedOrigins(cfg.AllowedOrigins) // validated above
	region, _ := qregion.Normalize(cfg.Region)             // validated above
	s.region = qregion.Header(region)
	s.workCond = sync.NewCond(&s.mu)
	s.signer.Store(newSigner(cfg.CurrentSigningKey))
	s.ctx, s.cancel = context.WithCancel(context.Background())

	if cfg.Client != nil {
		c := *cfg.Client
		s.client = &c
	} else {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// Keep a warm connection per worker, or a busy destination would
		// churn through new connections (and ephemeral ports).
		t.MaxIdleConns = 0
		t.MaxIdleConnsPerHost = cfg.Concurrency
		// Bodies and headers reach the destination as sent.
		t.DisableCompression = true
		s.transport = t
		s.client = &http.Client{Transport: t}
		s.lan = newLANClient(cfg.Concurrency)
	}
	// QStash does not follow redirects: a 3xx is a failed attempt.
	s.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

	s.sched.Add(1)
	go s.scheduler()
	s.workers.Add(cfg.Concurrency)
	for range cfg.Concurrency {
		go s.worker()
	}
	return s, nil
}

// Handler returns the QStash REST API (the /v2/... paths). It routes on the
// escaped request path itself, because http.ServeMux would clean the "//" in
// "/v2/publish/https://..." and answer with a redirect.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serveAPI) }

// Serve answers the API on ln until Shutdown or Close, then returns
// http.ErrServerClosed. With DefaultToken it serves only on loopback: on
// any other address it closes ln and returns ErrPublicToken (see
// CheckListenAddr).
func (s *Server) Serve(ln net.Listener) error {
	if err := s.CheckListenAddr(ln.Addr()); err != nil {
		ln.Close()
		return err
	}
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		ln.Close()
		return http.ErrServerClosed
	}
	s.servers = append(s.servers, hs)
	s.mu.Unlock()
	return hs.Serve(ln)
}

// ListenAndServe listens on addr (DefaultAddr if empty) and serves the API
// (on loopback only with DefaultToken, see Serve) until ctx is done, then shuts down gracefully, giving attempts in flight
// up to 10 seconds. The server is stopped when it returns, whatever the
// reason; the error is nil after a shutdown caused by ctx.
func (s *Server) ListenAndServe(ctx context.Context, addr string) error {
	if addr == "" {
		addr = DefaultAddr
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		s.Close()
		return fmt.Errorf("qstashdev: listen on %s: %w", addr, err)
	}
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(ln) }()
	select {
	case err := <-errc:
		s.Close()
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = s.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// Shutdown stops the server gracefully: listeners close, no new attempt
// starts, and attempts in flight may finish until ctx is done; then they are
// cancelled. Every goroutine the server started has ended when it returns.
// Messages not yet delivered are dropped, as the server keeps nothing on
// disk.
func (s *Server) Shutdown(ctx context.Context) error {
	servers := s.beginStop()
	var errs []error
	for _, hs := range servers {
		if err := hs.Shutdown(ctx); err != nil {
			errs = append(errs, err)
			hs.Close()
		}
	}
	done := make(chan struct{})
	go func() { s.workers.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, ctx.Err())
		s.cancel()
		if s.lan != nil {
			s.lan.close()
		}
		<-done
	}
	s.finishStop()
	return errors.Join(errs...)
}

// Close stops the server at once, cancelling attempts in flight. Every
// goroutine the server started has ended when it returns.
func (s *Server) Close() error {
	servers := s.beginStop()
	s.cancel()
	if s.lan != nil {
		s.lan.close() // fail attempts blocked on a hung destination
	}
	var errs []error
	for _, hs := range servers {
		if err := hs.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	s.workers.Wait()
	s.finishStop()
	return errors.Join(errs...)
}

func (s *Server) beginStop() []*http.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopping = true
	s.workCond.Broadcast()
	if s.idleCh != nil {
		close(s.idleCh)
		s.idleCh = nil
	}
	s.signalChangeLocked()
	servers := s.servers
	s.servers = nil
	return servers
}

func (s *Server) finishStop() {
	s.once.Do(func() { close(s.stop) })
	s.sched.Wait()
	s.cancel()
	if s.transport != nil {
		s.transport.CloseIdleConnections()
	}
	if s.lan != nil {
		s.lan.close()
	}
}

// WaitIdle blocks until no message is pending: every message, including
// callbacks and delayed or retrying ones, has been delivered, failed into
// the DLQ, or been cancelled. Messages on a paused queue keep it waiting. It
// returns ctx.Err() if ctx ends first and ErrClosed if the server stops.
func (s *Server) WaitIdle(ctx context.Context) error {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return ErrClosed
	}
	if s.pending == 0 {
		s.mu.Unlock()
		return nil
	}
	if s.idleCh == nil {
		s.idleCh = make(chan struct{})
	}
	ch := s.idleCh
	s.mu.Unlock()
	select {
	case <-ch:
		s.mu.Lock()
		stopping := s.stopping
		s.mu.Unlock()
		if stopping {
			return ErrClosed
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// WaitFor blocks until cond returns true, evaluating it at once and again
// after every change the server records (an event, a DLQ change, a key
// rotation). cond runs without the server's lock, so it may call the
// server's introspection methods. It returns ctx.Err() if ctx ends first and
// ErrClosed if the server stops.
func (s *Server) WaitFor(ctx context.Context, cond func() bool) error {
	for {
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			return ErrClosed
		}
		// Take the channel before evaluating cond, so a change that lands
		// in between still wakes us.
		if s.changed == nil {
			s.changed = make(chan struct{})
		}
		ch := s.changed
		s.mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// signalChangeLocked wakes WaitFor callers. The channel is only made while
// someone waits, so the delivery hot path pays nothing otherwise.
func (s *Server) signalChangeLocked() {
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
}

// scheduler moves messages from the timer heap when they become due. It is
// the only goroutine that waits on the clock.
func (s *Server) scheduler() {
	defer s.sched.Done()
	var t Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		s.mu.Lock()
		s.runDueLocked(s.clock.Now())
		var next time.Time
		has := len(s.timers) > 0
		if has {
			next = s.timers[0].at
		}
		s.mu.Unlock()

		if t != nil {
			t.Stop()
			t = nil
		}
		var fire <-chan time.Time
		if has {
			t = s.clock.NewTimer(next.Sub(s.clock.Now()))
			fire = t.C()
		}
		select {
		case <-s.stop:
			return
		case <-s.wake:
		case <-fire:
		}
	}
}

// worker runs delivery attempts from the ready list. A fixed pool bounds
// the goroutines and sockets a burst of messages can use. Each worker
// settles its last attempt and takes the next message in one critical
// section, so a delivery costs one lock acquisition: with dozens of workers
// on a few cores, a second one per message turns the lock into a convoy.
func (s *Server) worker() {
	defer s.workers.Done()
	// Attempt contexts hang off a per-worker context rather than s.ctx
	// directly, so creating and cancelling them does not contend on one
	// parent's lock.
	wctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	var (
		last    *message
		retried int
		res     attemptResult
		out     outcome
	)
	s.mu.Lock()
	for {
		if last != nil {
			s.inflight--
			s.completeLocked(last, retried, &res, &out)
			last = nil
		}
		for s.ready.len() == 0 && !s.stopping {
			s.workCond.Wait()
		}
		if s.stopping {
			s.mu.Unlock()
			return
		}
		m := s.ready.pop()
		if m.state != stReady {
			continue // cancelled while ready
		}
		m.state = stActive
		retried = m.retried
		s.inflight++
		s.recordLocked(m, StateActive, s.clock.Now(), "", time.Time{}, 0)
		s.mu.Unlock()

		res = s.attempt(wctx, m, retried)
		out = s.prepareOutcome(m, retried, &res)
		last = m

		s.mu.Lock()
	}
}
