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
	// StateCancelled is spelled as in QStash's API reference (the events
	// and logs endpoints answer CANCELLED). The SDKs disagree with it: the
	// TypeScript SDK's State type and the Go SDK v1.0.0's constant say
	// "CANCELED". A state filter takes either spelling.
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
	// Labels are all the message's labels (Label is the first).
	Labels []string
	// ScheduleID, FlowControlKey and CallerIP are the message's, if set.
	ScheduleID     string
	FlowControlKey string
	CallerIP       string
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

// oldestFirst calls f on events from oldest to newest until f returns false.
func (l *eventLog) oldestFirst(f func(*Event) bool) {
	n := len(l.buf)
	for i := 0; i < n; i++ {
		if !f(&l.buf[(l.head+i)%n]) {
			return
		}
	}
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
	if m.scheduleID != "" {
		s.noteScheduledLocked(m, state)
	}
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
		Label:            firstLabel(m.labels),
		Labels:           m.labels,
		ScheduleID:       m.scheduleID,
		FlowControlKey:   m.fcKey,
		CallerIP:         m.callerIP,
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
	Time             int64    `json:"time"`
	MessageID        string   `json:"messageId"`
	State            string   `json:"state"`
	Error            string   `json:"error,omitempty"`
	NextDeliveryTime int64    `json:"nextDeliveryTime,omitempty"`
	URL              string   `json:"url"`
	TopicName        string   `json:"topicName,omitempty"`
	EndpointName     string   `json:"endpointName,omitempty"`
	QueueName        string   `json:"queueName,omitempty"`
	ScheduleID       string   `json:"scheduleId,omitempty"`
	FlowControlKey   string   `json:"flowControlKey,omitempty"`
	Label            string   `json:"label,omitempty"`
	Labels           []string `json:"labels,omitempty"`
	ResponseStatus   int      `json:"responseStatus,omitempty"`
}

// eventFilters are the log's filters. messageId, like messageIds, may be
// given several times.
var eventFilters = []string{"messageId", "state", "url", "topicName", "urlGroup", "scheduleId",
	"queueName", "label", "flowControlKey", "callerIp", "callerIP", "host", "path"}

func (e *Event) record() *record {
	return &record{messageID: e.MessageID, url: e.URL, group: e.URLGroup, queue: e.QueueName,
		fcKey: e.FlowControlKey, callerIP: e.CallerIP, scheduleID: e.ScheduleID, state: e.State,
		labels: e.Labels, status: e.ResponseStatus, at: e.Time}
}

// handleEvents serves GET /v2/events, and GET /v2/logs, its new name,
// whose answer calls the list "logs": newest first unless order is
// earliestFirst, count (default and maximum 1000), cursor, messageIds
// (repeated: any of them), and the filters of eventFilters with fromDate
// and toDate (unix ms, inclusive). state takes IN_PROGRESS (ACTIVE, RETRY
// or ERROR) and CANCELED (the TypeScript SDK's spelling of CANCELLED).
func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request, listKey string) {
	if r.Method != http.MethodGet {
		methodNotAllowed(w, http.MethodGet)
		return
	}
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
	f, aerr := parseFilters(q, eventFilters, "messageIds", false)
	if aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	if raw, ok := q["messageIds"]; ok {
		ids, aerr := queryValues("messageIds", raw, true)
		if aerr != nil {
			writeAPIError(w, aerr)
			return
		}
		f.vals["messageId"] = append(f.vals["messageId"], ids...)
	}
	earliest := false
	switch q.Get("order") {
	case "", "latestFirst":
	case "earliestFirst":
		earliest = true
	default:
		writeError(w, http.StatusBadRequest, "order must be earliestFirst or latestFirst")
		return
	}
	var cursorOut string
	events := []wireEvent{}
	s.mu.Lock()
	visit := func(e *Event) bool {
		if cursor != 0 && (!earliest && e.Seq > cursor || earliest && e.Seq < cursor) {
			return true
		}
		if !f.match(e.record()) {
			return true
		}
		if len(events) == count {
			cursorOut = strconv.FormatUint(e.Seq, 10)
			return false
		}
		we := wireEvent{
			Time: e.Time.UnixMilli(), MessageID: e.MessageID, State: e.State, Error: e.Error,
			URL: e.URL, TopicName: e.URLGroup, EndpointName: e.EndpointName,
			QueueName: e.QueueName, ScheduleID: e.ScheduleID, FlowControlKey: e.FlowControlKey,
			Label: e.Label, Labels: e.Labels, ResponseStatus: e.ResponseStatus,
		}
		if !e.NextDeliveryTime.IsZero() {
			we.NextDeliveryTime = e.NextDeliveryTime.UnixMilli()
		}
		events = append(events, we)
		return true
	}
	if earliest {
		s.events.oldestFirst(visit)
	} else {
		s.events.newestFirst(visit)
	}
	s.mu.Unlock()
	resp := map[string]any{listKey: events}
	if cursorOut != "" {
		resp["cursor"] = cursorOut
	}
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
