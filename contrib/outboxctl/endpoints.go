package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// readyReport is /readyz's body. Ready is the answer (200 or 503);
// Reasons say, one line each, what keeps the relay from being ready.
type readyReport struct {
	Ready     bool             `json:"ready"`
	Status    string           `json:"status"` // ready, not ready, waiting, starting, stopping
	Reasons   []string         `json:"reasons,omitempty"`
	Transport *depReport       `json:"transport,omitempty"`
	Databases []databaseReport `json:"databases"`
	Tenants   []tenantStatus   `json:"tenants"`
}

type depReport struct {
	Name  string `json:"name"`
	Up    bool   `json:"up"`
	Error string `json:"error,omitempty"`
}

type databaseReport struct {
	Database string `json:"database"`
	Up       bool   `json:"up"`
	Error    string `json:"error,omitempty"`
}

// readiness is what /readyz answers: ready when the service has started,
// the transport answers, every database answers its pings, and every
// tenant runs with its schema current and a claim completed recently.
func (svc *service) readiness() readyReport {
	now := time.Now()
	svc.mu.Lock()
	phase, waiting, tr := svc.phase, svc.waitingFor, svc.transport
	svc.mu.Unlock()
	rep := readyReport{Status: phase, Databases: []databaseReport{}, Tenants: []tenantStatus{}}
	if waiting != "" {
		rep.Status = "waiting"
		rep.Reasons = append(rep.Reasons, waiting)
	}
	kind := strings.ToLower(svc.s.tf.kind)
	if tr.checked {
		rep.Transport = &depReport{Name: kind, Up: tr.up, Error: tr.err}
		if !tr.up {
			rep.Reasons = append(rep.Reasons, fmt.Sprintf("transport %s: %s", kind, tr.err))
		}
	} else {
		rep.Transport = &depReport{Name: kind, Error: "not connected yet"}
	}
	for _, db := range svc.dbs {
		db.mu.Lock()
		d := databaseReport{Database: db.spec.Name, Up: db.dep.checked && db.dep.up, Error: db.dep.err}
		db.mu.Unlock()
		if !d.Up && d.Error == "" {
			d.Error = "not connected yet"
		}
		rep.Databases = append(rep.Databases, d)
		if !d.Up && phase == "running" {
			rep.Reasons = append(rep.Reasons, fmt.Sprintf("database %s: %s", d.Database, d.Error))
		}
	}
	ready := 0
	for _, t := range svc.tenants() {
		up, _ := t.db.up()
		st := t.status(now, up)
		rep.Tenants = append(rep.Tenants, st)
		if st.Ready {
			ready++
		} else {
			rep.Reasons = append(rep.Reasons, fmt.Sprintf("tenant %s/%s.%s: %s", st.Database, st.Schema, st.Table, st.Reason))
		}
	}
	if phase == "running" && len(rep.Tenants) == 0 {
		rep.Reasons = append(rep.Reasons, "no tenant: no listed or discovered schema holds the outbox table yet")
	}
	if phase == "stopping" {
		rep.Reasons = append(rep.Reasons, "shutting down")
	}
	rep.Ready = phase == "running" && len(rep.Reasons) == 0
	switch {
	case rep.Ready:
		rep.Status = "ready"
	case phase == "running":
		rep.Status = "not ready"
	}
	return rep
}

// handler serves /metrics, /healthz, /readyz and, with --pprof,
// /debug/pprof/.
func (svc *service) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(svc.tel.registry, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError,
		ErrorLog:      promLogger{svc.log},
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		// Alive is all it says: a relay whose dependencies are down is
		// still doing its job (waiting, retrying), and restarting it
		// would fix nothing.
		writeHTTPJSON(w, http.StatusOK, map[string]string{"status": "alive"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		rep := svc.readiness()
		code := http.StatusOK
		if !rep.Ready {
			code = http.StatusServiceUnavailable
		}
		writeHTTPJSON(w, code, rep)
	})
	if svc.s.pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

func writeHTTPJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// promLogger sends the Prometheus handler's errors to the relay's log.
type promLogger struct{ log *slog.Logger }

func (l promLogger) Println(v ...any) { l.log.Warn("metrics", "error", fmt.Sprint(v...)) }

// httpServer is the service's HTTP server.
type httpServer struct {
	srv  *http.Server
	addr string
	wg   sync.WaitGroup
}

func newHTTPServer(addr string, h http.Handler, logger *slog.Logger) (*httpServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &httpServer{
		srv: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 5 * time.Second,
			// pprof's profile and trace stream for as long as they are
			// asked (30s by default).
			WriteTimeout: 2 * time.Minute,
			IdleTimeout:  2 * time.Minute,
			ErrorLog:     slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		},
		addr: ln.Addr().String(),
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("HTTP server stopped", "error", err)
		}
	}()
	return s, nil
}

// close stops the server, letting requests in progress finish briefly.
func (s *httpServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
	s.wg.Wait()
}
