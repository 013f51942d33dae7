package qstashdev

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// serveAPI routes the REST API. Routing is by hand on the escaped path:
// destinations are whole URLs inside the path ("/v2/publish/https://x/a"),
// which http.ServeMux would clean and redirect.
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	if s.checkBrowser(w, r) {
		return
	}
	path := r.URL.EscapedPath()
	rest, ok := strings.CutPrefix(path, "/v2/")
	if !ok {
		writeError(w, http.StatusNotFound, "not found: the QStash API lives under /v2/")
		return
	}
	if !s.authorized(r) {
		writeError(w, http.StatusUnauthorized, "unauthorized: send Authorization: Bearer <token> or ?qstash_token=<token>")
		return
	}
	s.mu.Lock()
	stopping := s.stopping
	s.mu.Unlock()
	if stopping {
		writeError(w, http.StatusServiceUnavailable, "server is shutting down")
		return
	}
	if s.cfg.Reject != nil {
		if rej := s.cfg.Reject(r); rej != nil {
			writeRejection(w, rej)
			return
		}
	}

	// Publish and enqueue carry a destination that may contain slashes and
	// a query string of its own.
	if d, ok := strings.CutPrefix(rest, "publish/"); ok {
		s.handlePublish(w, r, destinationFrom(d, r.URL.RawQuery), "")
		return
	}
	if d, ok := strings.CutPrefix(rest, "enqueue/"); ok {
		qname, d, found := strings.Cut(d, "/")
		if !found || qname == "" {
			writeError(w, http.StatusBadRequest, "enqueue path is /v2/enqueue/<queue>/<destination>")
			return
		}
		if uq, err := url.PathUnescape(qname); err == nil {
			qname = uq
		}
		s.handlePublish(w, r, destinationFrom(d, r.URL.RawQuery), qname)
		return
	}

	if d, ok := schedulesSegment(rest); ok && isScheduleCreate(r) {
		s.handleScheduleCreate(w, r, destinationFrom(d, r.URL.RawQuery))
		return
	}

	if fc, ok := strings.CutPrefix(rest, "flowControl"); ok && (fc == "" || fc[0] == '/') {
		s.handleFlowControl(w, r, strings.TrimSuffix(fc, "/"))
		return
	}

	seg := strings.Split(strings.TrimSuffix(rest, "/"), "/")
	for i, p := range seg {
		if u, err := url.PathUnescape(p); err == nil {
			seg[i] = u
		}
	}
	switch {
	case len(seg) == 1 && seg[0] == "batch":
		s.handleBatch(w, r)
	case seg[0] == "messages" && len(seg) == 1:
		s.handleMessages(w, r)
	case seg[0] == "messages" && len(seg) == 2:
		s.handleMessage(w, r, seg[1])
	case seg[0] == "dlq" && len(seg) == 1:
		s.handleDLQList(w, r)
	case seg[0] == "dlq" && len(seg) == 2 && seg[1] == "retry":
		s.handleDLQRetry(w, r, "")
	case seg[0] == "dlq" && len(seg) == 3 && seg[1] == "retry":
		s.handleDLQRetry(w, r, seg[2])
	case seg[0] == "dlq" && len(seg) == 2:
		s.handleDLQEntry(w, r, seg[1])
	case seg[0] == "events" && len(seg) == 1:
		s.handleEvents(w, r, "events")
	case seg[0] == "logs" && len(seg) == 1:
		s.handleEvents(w, r, "logs")
	case seg[0] == "globalParallelism" && len(seg) == 1:
		s.handleGlobalParallelism(w, r)
	case seg[0] == "keys" && len(seg) == 1:
		s.handleKeys(w, r)
	case seg[0] == "keys" && len(seg) == 2 && seg[1] == "rotate", seg[0] == "rotate" && len(seg) == 1:
		s.handleRotate(w, r)
	case seg[0] == "queues" && len(seg) == 1:
		s.handleQueues(w, r)
	case seg[0] == "queues" && len(seg) == 2:
		s.handleQueue(w, r, seg[1], "")
	case seg[0] == "queues" && len(seg) == 3:
		s.handleQueue(w, r, seg[1], seg[2])
	case seg[0] == "topics" && len(seg) == 1:
		s.handleTopics(w, r)
	case seg[0] == "topics" && len(seg) == 2:
		s.handleTopic(w, r, seg[1], "")
	case seg[0] == "topics" && len(seg) == 3:
		s.handleTopic(w, r, seg[1], seg[2])
	case strings.EqualFold(seg[0], "schedules"):
		s.handleSchedules(w, r, seg)
	default:
		writeError(w, http.StatusNotFound, "unknown path "+path)
	}
}

// destinationFrom rebuilds the destination of a publish path. SDKs put the
// URL in the path unescaped, so its query string arrives as the request's
// (minus our own qstash_token, see stripToken). A fully escaped destination
// ("https%3A%2F%2F...") is unescaped, and a scheme whose "//" a proxy
// collapsed ("https:/x") is repaired.
func destinationFrom(d, rawQuery string) string {
	if !strings.Contains(d, "://") {
		if u, err := url.PathUnescape(d); err == nil && strings.Contains(u, "://") {
			d = u
		}
	}
	for _, scheme := range []string{"https:/", "http:/"} {
		if strings.HasPrefix(d, scheme) && !strings.HasPrefix(d, scheme+"/") {
			d = scheme + "/" + d[len(scheme):]
		}
	}
	if q := stripToken(rawQuery); q != "" {
		d += "?" + q
	}
	return d
}

// readBody reads at most limit bytes, answering 413 beyond that.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, "request body is larger than "+strconv.FormatInt(limit, 10)+" bytes")
			return nil, false
		}
		writeError(w, http.StatusBadRequest, "read request body: "+err.Error())
		return nil, false
	}
	return body, true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "encode response: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	b, _ := json.Marshal(struct {
		Error string `json:"error"`
	}{msg})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

func writeAPIError(w http.ResponseWriter, e *apiError) {
	for k, v := range e.header {
		w.Header()[k] = v
	}
	writeError(w, e.status, e.msg)
}

func writeRejection(w http.ResponseWriter, rej *Rejection) {
	status := rej.Status
	if status == 0 {
		status = http.StatusTooManyRequests
	}
	for k, v := range rej.Header {
		w.Header()[k] = v
	}
	msg := rej.Message
	if msg == "" {
		msg = http.StatusText(status)
	}
	writeError(w, status, msg)
}

func methodNotAllowed(w http.ResponseWriter, allowed ...string) {
	w.Header().Set("Allow", strings.Join(allowed, ", "))
	writeError(w, http.StatusMethodNotAllowed, "method not allowed: use "+strings.Join(allowed, " or "))
}
