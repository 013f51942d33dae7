package qstashdev

import (
	"net/http"
	"strconv"
	"time"
)

// The states a message passes through, as QStash's events API names them:
// CREATED → ACTIVE → DELIVERED, or ACTIVE → ERROR → RETRY → ACTIVE … →
// FAILED; a cancel adds CANCEL_REQUESTED → CANCELLED.
const (
	StateCreated         = "CREATED"
	StateActive          = "ACTIVE"
	StateDelivered       = "DELIVERED"
	StateError           = "ERROR"
	StateRetry           = "RETRY"
	StateFailed          = "FAILED"
	StateCancelRequested = "CANCEL_REQUESTED"
	// StateCancelled is spelled as in QStash's API documentation and the JS
	// SDK; the Go SDK v1.0.0's constant says "CANCELED".
	StateCancelled = "CANCELLED"
)

// Event is one entry of the event log (GET /v2/events).
type Event struct {
	// Seq orders events; it is the cursor of the events API.
	Seq uint64
	// Time is when the state was entered.
	Time time.Time
	// MessageID is the message the event is about.
	MessageID string
	// State is one of the State constants.
	State string
	// Error says why an attempt failed (ERROR, FAILED).
	Error string
	// NextDeliveryTime is when a RETRY is due.
	NextDeliveryTime time.Time
	// URL is the message's destination.
	URL string
	// URLGroup, EndpointName, QueueName and Label are the message's, if
	// set.
	URLGroup     string
	EndpointName string
	QueueName    string
	Label        string
	// ResponseStatus is the destination's status for DELIVERED, ERROR and
	// FAILED (0 when no response came).
	ResponseStatus int
}

// eventLog is a ring of the newest max events.
type eventLog struct {
	buf  []Event
	head int // index of the oldest event once the ring is full
	max  int
	seq  uint64
}

func (l *eventLog) add(e Event) {
	l.seq++
	e.Seq = l.seq
	if len(l.buf) < l.max {
		l.buf = append(l.buf, e)
		return
	}
	l.buf[l.head] = e
	l.head = (l.head + 1) % l.max
}

// newestFirst calls f on events from newest to oldest until f returns false.
func (l *eventLog) newestFirst(f func(*Event) bool) {
	n := len(l.buf)
	for i := 0; i < n; i++ {
		idx := (l.head + n - 1 - i) % n
		if !f(&l.buf[idx]) {
			return
		}
	}
}

func (s *Server) recordLocked(m *message, state string, now time.Time, errText string, next time.Time, status int) {
	s.events.add(Event{
		Time:             now,
		MessageID:        m.id,
		State:            state,
		Error:            errText,
		NextDeliveryTime: next,
		URL:              m.url,
		URLGroup:         m.group,
		EndpointName:     m.endpointName,
		QueueName:        m.queueName,
		Label:            m.label,
		ResponseStatus:   status,
	})
	s.signalChangeLocked()
}

// Events returns the event log, oldest first.
func (s *Server) Events() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Event, 0, len(s.events.buf))
	s.events.newestFirst(func(e *Event) bool { out = append(out, *e); return true })
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// MessageEvents returns the events of one message, oldest first.
func (s *Server) MessageEvents(id string) []Event {
	var out []Event
	for _, e := range s.Events() {
		if e.MessageID == id {
			out = append(out, e)
		}
	}
	return out
}

type wireEvent struct {
	Time             int64  `json:"time"`
	MessageID        string `json:"messageId"`
	State            string `json:"state"`
	Error            string `json:"error,omitempty"`
	NextDeliveryTime int64  `json:"nextDeliveryTime,omitempty"`
	URL              string `json:"url"`
	TopicName        string `json:"topicName,omitempty"`
	EndpointName     string `json:"endpointName,omitempty"`
	QueueName        string `json:"queueName,omitempty"`
	Label            string `json:"label,omitempty"`
	ResponseStatus   int    `json:"responseStatus,omitempty"`
}

// handleEvents serves GET /v2/events: newest first, count (default and
// maximum 1000), cursor, and filters messageId, state, url, topicName,
// queueName, label, fromDate, toDate (unix ms, inclusive).
func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	count, err := countParam(q.Get("count"), 1000)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	var cursor uint64
	if c := q.Get("cursor"); c != "" {
		if cursor, err = strconv.ParseUint(c, 10, 64); err != nil {
			writeError(w, http.StatusBadRequest, "invalid cursor: pass back the cursor of a previous answer")
			return
		}
	}
	from, to, err := dateRange(q.Get("fromDate"), q.Get("toDate"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	match := func(e *Event) bool {
		return (cursor == 0 || e.Seq <= cursor) &&
			eq(q.Get("messageId"), e.MessageID) && eq(q.Get("state"), e.State) &&
			eq(q.Get("url"), e.URL) && eq(q.Get("topicName"), e.URLGroup) &&
			eq(q.Get("queueName"), e.QueueName) && eq(q.Get("label"), e.Label) &&
			inRange(e.Time, from, to)
	}
	resp := struct {
		Cursor string      `json:"cursor,omitempty"`
		Events []wireEvent `json:"events"`
	}{Events: []wireEvent{}}
	s.mu.Lock()
	s.events.newestFirst(func(e *Event) bool {
		if !match(e) {
			return true
		}
		if len(resp.Events) == count {
			resp.Cursor = strconv.FormatUint(e.Seq, 10)
			return false
		}
		we := wireEvent{
			Time: e.Time.UnixMilli(), MessageID: e.MessageID, State: e.State, Error: e.Error,
			URL: e.URL, TopicName: e.URLGroup, EndpointName: e.EndpointName,
			QueueName: e.QueueName, Label: e.Label, ResponseStatus: e.ResponseStatus,
		}
		if !e.NextDeliveryTime.IsZero() {
			we.NextDeliveryTime = e.NextDeliveryTime.UnixMilli()
		}
		resp.Events = append(resp.Events, we)
		return true
	})
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, resp)
}

func eq(filter, v string) bool { return filter == "" || filter == v }

func inRange(t, from, to time.Time) bool {
	return (from.IsZero() || !t.Before(from)) && (to.IsZero() || !t.After(to))
}

func dateRange(fromS, toS string) (from, to time.Time, err error) {
	parse := func(name, v string) (time.Time, error) {
		if v == "" {
			return time.Time{}, nil
		}
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return time.Time{}, &paramError{name + " must be unix milliseconds, got " + strconv.Quote(v)}
		}
		return time.UnixMilli(ms), nil
	}
	if from, err = parse("fromDate", fromS); err != nil {
		return
	}
	to, err = parse("toDate", toS)
	return
}

func countParam(v string, max int) (int, error) {
	if v == "" {
		return max, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, &paramError{"count must be a positive integer, got " + strconv.Quote(v)}
	}
	return min(n, max), nil
}

type paramError struct{ msg string }

func (e *paramError) Error() string { return e.msg }
