package qstashdev

import (
	"encoding/base64"
	"net/http"
	"sort"
	"time"
	"unicode/utf8"
)

// Message is a snapshot of a message that is not finished yet: waiting,
// in flight, or between retries.
type Message struct {
	// ID is the message id, "msg_..."; each fan-out target of a URL group
	// has its own.
	ID string
	// URL is the destination URL, also the signature's sub claim.
	URL string
	// URLGroup is the group published to, if any.
	URLGroup string
	// EndpointName is the group endpoint's name, if it has one.
	EndpointName string
	// Queue is the queue enqueued to, if any.
	Queue string
	// Method is the HTTP method of deliveries (Upstash-Method; POST).
	Method string
	// Header holds the headers delivered with the message: the forwarded
	// ones (Upstash-Forward- prefix stripped) and Content-Type.
	Header http.Header
	// Body is delivered unchanged.
	Body []byte
	// MaxRetries is Upstash-Retries: attempts = 1 + MaxRetries.
	MaxRetries int
	// Retried counts failed attempts so far; the next attempt carries it as
	// Upstash-Retried.
	Retried int
	// State is CREATED, ACTIVE, RETRY or CANCEL_REQUESTED.
	State string
	// NotBefore is when the first attempt may start (zero: at once).
	NotBefore time.Time
	// NextDeliveryTime is when a delayed or retrying message is due.
	NextDeliveryTime time.Time
	// CreatedAt is when the message was published.
	CreatedAt time.Time
	// Callback is Upstash-Callback, told of every attempt.
	Callback string
	// FailureCallback is Upstash-Failure-Callback, told of the final failure.
	FailureCallback string
	// CallerIP is the publisher's address.
	CallerIP string
	// Label is the first label of Upstash-Label, a filter for events and
	// the DLQ (QStash's deprecated "label" field).
	Label string
	// Labels are every label of Upstash-Label, which separates them with
	// commas ("a,b" is two labels). Each is a filter of its own.
	Labels []string
	// ScheduleID is the schedule that created the message, if one did.
	ScheduleID string
	// RedactFields is Upstash-Redact-Fields as parsed: what the REST API
	// shows as REDACTED:<sha256> instead of its value. This snapshot, a Go
	// API for tests, holds the real values.
	RedactFields []string
	// RetryDelay is the Upstash-Retry-Delay expression.
	RetryDelay string
	// Timeout is Upstash-Timeout (zero: Config.Timeout).
	Timeout time.Duration
	// FlowControlKey is Upstash-Flow-Control-Key, with the limits this
	// message was published with (Parallelism, Rate per Period).
	FlowControlKey string
	// Parallelism is the flow-control parallelism (0: unlimited).
	Parallelism int
	// Rate is the flow-control rate per Period (0: unlimited).
	Rate int
	// Period is the flow-control rate window.
	Period time.Duration
	// SourceMessageID is set on callback messages: the message whose
	// attempt they report.
	SourceMessageID string
}

func (m *message) snapshotLocked() Message {
	out := m.snapshotFixed()
	out.Retried = m.retried
	switch {
	case m.cancelRequested:
		out.State = StateCancelRequested
	case m.state == stActive:
		out.State = StateActive
	case m.retried > 0:
		out.State = StateRetry
	default:
		out.State = StateCreated
	}
	if m.state == stScheduled {
		out.NextDeliveryTime = m.nextAt
	}
	return out
}

// snapshotFixed copies the fields fixed at creation.
func (m *message) snapshotFixed() Message {
	out := Message{
		ID: m.id, URL: m.url, URLGroup: m.group, EndpointName: m.endpointName,
		Queue: m.queueName, Method: m.method, Header: m.header.Clone(),
		Body: append([]byte(nil), m.body...), MaxRetries: m.maxRetries,
		NotBefore: m.notBefore, CreatedAt: m.createdAt, Callback: m.callback,
		FailureCallback: m.failureCallback, CallerIP: m.callerIP, Label: firstLabel(m.labels),
		Labels: append([]string(nil), m.labels...), ScheduleID: m.scheduleID, RedactFields: m.redact.fields(),
		Timeout: m.timeout, FlowControlKey: m.fcKey, Parallelism: m.fcPar,
		Rate: m.fcRate, SourceMessageID: m.sourceMsgID,
	}
	if m.fcKey != "" {
		out.Period = m.fcPeriod
	}
	if m.retryDelay != nil {
		out.RetryDelay = m.retryDelay.src
	}
	return out
}

// Messages returns the messages not finished yet, oldest first. Delivered,
// failed and cancelled messages are gone (the DLQ keeps the failed ones).
func (s *Server) Messages() []Message {
	s.mu.Lock()
	out := make([]Message, 0, len(s.messages))
	for _, m := range s.messages {
		out = append(out, m.snapshotLocked())
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Message returns the message with the given id while it is not finished.
func (s *Server) Message(id string) (Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.messages[id]
	if !ok {
		return Message{}, false
	}
	return m.snapshotLocked(), true
}

// Cancel cancels a message as DELETE /v2/messages/{id} does. It reports
// false if the message is unknown or already finished. An attempt in flight
// is not recalled; the message is just not retried after it.
func (s *Server) Cancel(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.messages[id]
	if ok {
		s.cancelLocked(m, s.clock.Now())
	}
	return ok
}

// wireMessage is the JSON shape of a message in the REST API.
type wireMessage struct {
	MessageID    string      `json:"messageId"`
	URL          string      `json:"url"`
	TopicName    string      `json:"topicName,omitempty"`
	URLGroup     string      `json:"urlGroup,omitempty"` // the Go SDK's name for topicName
	EndpointName string      `json:"endpointName,omitempty"`
	Method       string      `json:"method"`
	Header       http.Header `json:"header"`
	// Body holds UTF-8 bodies; others travel base64-encoded in BodyBase64.
	Body                 string   `json:"body,omitempty"`
	BodyBase64           string   `json:"bodyBase64,omitempty"`
	MaxRetries           int      `json:"maxRetries"`
	Retried              int      `json:"retried,omitempty"`
	NotBefore            int64    `json:"notBefore"`
	CreatedAt            int64    `json:"createdAt"`
	Callback             string   `json:"callback,omitempty"`
	FailureCallback      string   `json:"failureCallback,omitempty"`
	CallerIP             string   `json:"callerIP,omitempty"`
	QueueName            string   `json:"queueName,omitempty"`
	Label                string   `json:"label,omitempty"`
	Labels               []string `json:"labels,omitempty"`
	ScheduleID           string   `json:"scheduleId,omitempty"`
	RetryDelayExpression string   `json:"retryDelayExpression,omitempty"`
	Timeout              int64    `json:"timeout,omitempty"` // seconds
	FlowControlKey       string   `json:"flowControlKey,omitempty"`
	Parallelism          int      `json:"parallelism,omitempty"`
	Rate                 int      `json:"rate,omitempty"`
	Period               int64    `json:"period,omitempty"` // seconds
	State                string   `json:"state,omitempty"`
}

func toWire(m Message) wireMessage {
	w := wireMessage{
		MessageID: m.ID, URL: m.URL, TopicName: m.URLGroup, URLGroup: m.URLGroup,
		EndpointName: m.EndpointName, Method: m.Method, Header: m.Header,
		MaxRetries: m.MaxRetries, Retried: m.Retried, CreatedAt: m.CreatedAt.UnixMilli(),
		Callback: m.Callback, FailureCallback: m.FailureCallback, CallerIP: m.CallerIP,
		QueueName: m.Queue, Label: m.Label, Labels: m.Labels, ScheduleID: m.ScheduleID,
		RetryDelayExpression: m.RetryDelay,
		Timeout:              int64(m.Timeout / time.Second), FlowControlKey: m.FlowControlKey,
		Parallelism: m.Parallelism, Rate: m.Rate, Period: int64(m.Period / time.Second),
		State: m.State,
	}
	if w.Header == nil {
		w.Header = http.Header{}
	}
	w.Body, w.BodyBase64 = textOrBase64(m.Body)
	red := redactionOf(m.RedactFields)
	w.Header = red.header(w.Header)
	if red.body {
		w.Body, w.BodyBase64 = redacted(m.Body), ""
	}
	if !m.NotBefore.IsZero() {
		w.NotBefore = m.NotBefore.UnixMilli()
	}
	return w
}

func textOrBase64(b []byte) (text, b64 string) {
	if utf8.Valid(b) {
		return string(b), ""
	}
	return "", base64.StdEncoding.EncodeToString(b)
}

// handleMessage serves GET and DELETE /v2/messages/{id}. A cancel answers
// 202 {"cancelled": 1}: the TypeScript SDK's messages.cancel(id) parses
// the answer as JSON.
func (s *Server) handleMessage(w http.ResponseWriter, r *http.Request, id string) {
	switch r.Method {
	case http.MethodGet:
		m, ok := s.Message(id)
		if !ok {
			writeError(w, http.StatusNotFound, "message "+id+" not found")
			return
		}
		writeJSON(w, http.StatusOK, toWire(m))
	case http.MethodDelete:
		if !s.Cancel(id) {
			writeError(w, http.StatusNotFound, "message "+id+" not found")
			return
		}
		writeJSON(w, http.StatusAccepted, map[string]int{"cancelled": 1})
	default:
		methodNotAllowed(w, http.MethodGet, http.MethodDelete)
	}
}

// cancelFilters are the filters of a bulk cancel, per the API reference.
var cancelFilters = []string{"topicName", "urlGroup", "queueName", "url", "host", "path", "label",
	"flowControlKey", "scheduleId", "callerIp", "callerIP"}

// handleMessages serves DELETE /v2/messages, the bulk cancel, answering
// 202 {"cancelled": n}. It cancels, in this order of precedence:
//   - the messages named by messageIds, as repeated query parameters (the
//     TypeScript SDK and the API reference) or in a JSON body
//     {"messageIds": [...]} (the Go SDK), and only those;
//   - else those matching the filters in the query;
//   - else, with neither, every pending message.
//
// A query parameter that is neither an ID nor a known filter is refused
// with 400, and so is an empty value: a typo must never widen the cancel
// to every message.
func (s *Server) handleMessages(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodDelete {
		methodNotAllowed(w, http.MethodDelete)
		return
	}
	f, aerr := parseFilters(r.URL.Query(), cancelFilters, "messageIds", true)
	if aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	ids, byID, ok := s.bulkIDs(w, r, "messageIds")
	if !ok {
		return
	}
	s.mu.Lock()
	now := s.clock.Now()
	n := 0
	if byID {
		for _, id := range ids {
			if m, ok := s.messages[id]; ok && !m.cancelRequested {
				s.cancelLocked(m, now)
				n++
			}
		}
	} else {
		var picked []*message
		for _, m := range s.messages {
			if !m.cancelRequested && f.match(m.record()) {
				picked = append(picked, m)
			}
		}
		for _, m := range picked {
			s.cancelLocked(m, now)
		}
		n = len(picked)
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusAccepted, map[string]int{"cancelled": n})
}

// record is what filters see of a message; its time is its creation.
func (m *message) record() *record {
	return &record{messageID: m.id, url: m.url, group: m.group, queue: m.queueName, fcKey: m.fcKey,
		callerIP: m.callerIP, scheduleID: m.scheduleID, labels: m.labels, at: m.createdAt}
}
