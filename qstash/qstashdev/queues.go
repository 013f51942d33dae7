package qstashdev

import (
	"encoding/json"
	"net/http"
	"sort"
	"time"
)

// Queue is a snapshot of a queue.
type Queue struct {
	// Name is the queue's name, from the enqueue path or POST /v2/queues.
	Name string
	// Parallelism is how many of its messages may be under way at once,
	// retries included (1 unless set).
	Parallelism int
	// Paused queues start no new message.
	Paused bool
	// Lag counts messages enqueued and not yet finished.
	Lag int
	// CreatedAt is when the queue was first used or upserted.
	CreatedAt time.Time
	// UpdatedAt is the last upsert, pause or resume.
	UpdatedAt time.Time
}

type wireQueue struct {
	Name        string `json:"name"`
	Parallelism int    `json:"parallelism"`
	Paused      bool   `json:"paused"`
	Lag         int    `json:"lag"`
	CreatedAt   int64  `json:"createdAt"`
	UpdatedAt   int64  `json:"updatedAt"`
}

func (q *queue) snapshot() Queue {
	return Queue{Name: q.name, Parallelism: q.parallelism, Paused: q.paused, Lag: q.unfinished,
		CreatedAt: q.createdAt, UpdatedAt: q.updatedAt}
}

func (q Queue) wire() wireQueue {
	return wireQueue{Name: q.Name, Parallelism: q.Parallelism, Paused: q.Paused, Lag: q.Lag,
		CreatedAt: q.CreatedAt.UnixMilli(), UpdatedAt: q.UpdatedAt.UnixMilli()}
}

// queueLocked returns the named queue, creating it with parallelism 1 as
// QStash does on the first enqueue.
func (s *Server) queueLocked(name string, now time.Time) *queue {
	q := s.queues[name]
	if q == nil {
		q = &queue{name: name, parallelism: 1, createdAt: now, updatedAt: now}
		s.queues[name] = q
	}
	return q
}

// Queues returns the queues, by name.
func (s *Server) Queues() []Queue {
	s.mu.Lock()
	out := make([]Queue, 0, len(s.queues))
	for _, q := range s.queues {
		out = append(out, q.snapshot())
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// handleQueues serves POST /v2/queues (upsert {"queueName","parallelism",
// "paused"}) and GET /v2/queues (list).
func (s *Server) handleQueues(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		qs := s.Queues()
		out := make([]wireQueue, len(qs))
		for i, q := range qs {
			out[i] = q.wire()
		}
		writeJSON(w, http.StatusOK, out)
	case http.MethodPost:
		body, ok := s.readBody(w, r, 1<<20)
		if !ok {
			return
		}
		var req struct {
			QueueName   string `json:"queueName"`
			Parallelism *int   `json:"parallelism"`
			Paused      *bool  `json:"paused"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			writeError(w, http.StatusBadRequest, "invalid JSON body: expected {\"queueName\":...,\"parallelism\":n}")
			return
		}
		if !validName(req.QueueName) {
			writeError(w, http.StatusBadRequest, "queueName is required and may hold letters, digits, '-', '_' and '.'")
			return
		}
		if req.Parallelism != nil && *req.Parallelism < 0 {
			writeError(w, http.StatusBadRequest, "parallelism must not be negative")
			return
		}
		s.mu.Lock()
		if aerr := s.newQueueAllowedLocked(req.QueueName, 0); aerr != nil {
			s.mu.Unlock()
			writeAPIError(w, aerr)
			return
		}
		now := s.clock.Now()
		q := s.queueLocked(req.QueueName, now)
		if req.Parallelism != nil {
			q.parallelism = max(*req.Parallelism, 1) // 0 means the default, 1
		}
		if req.Paused != nil {
			q.paused = *req.Paused
		}
		q.updatedAt = now
		s.dispatchQueueLocked(q, now)
		s.signalChangeLocked()
		s.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	default:
		methodNotAllowed(w, http.MethodGet, http.MethodPost)
	}
}

// handleQueue serves GET and DELETE /v2/queues/{name} and POST
// /v2/queues/{name}/pause|resume.
func (s *Server) handleQueue(w http.ResponseWriter, r *http.Request, name, action string) {
	s.mu.Lock()
	q, ok := s.queues[name]
	s.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, "queue "+name+" not found")
		return
	}
	switch {
	case action == "" && r.Method == http.MethodGet:
		s.mu.Lock()
		snap := q.snapshot()
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, snap.wire())
	case action == "" && r.Method == http.MethodDelete:
		// Deleting a queue cancels what it still holds: nothing can deliver
		// it any more.
		s.mu.Lock()
		now := s.clock.Now()
		for _, m := range s.messages {
			if m.queue == q {
				s.cancelLocked(m, now)
			}
		}
		if s.queues[name] == q {
			delete(s.queues, name)
		}
		s.signalChangeLocked()
		s.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	case action == "":
		methodNotAllowed(w, http.MethodGet, http.MethodDelete)
	case r.Method != http.MethodPost:
		methodNotAllowed(w, http.MethodPost)
	case action == "pause" || action == "resume":
		s.mu.Lock()
		now := s.clock.Now()
		q.paused = action == "pause"
		q.updatedAt = now
		s.dispatchQueueLocked(q, now)
		s.signalChangeLocked()
		s.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	default:
		writeError(w, http.StatusNotFound, "unknown queue action "+action+": use pause or resume")
	}
}

// validName accepts QStash's queue and URL-group names.
func validName(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}
