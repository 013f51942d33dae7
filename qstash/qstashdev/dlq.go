package qstashdev

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// DLQEntry is a message that failed its last attempt (or was refused with a
// non-retryable 489), kept with that attempt's response.
type DLQEntry struct {
	// DLQID is "<unix ms>-<sequence>", as in QStash.
	DLQID string
	// Message is the failed message as it was published; its Retried is
	// the last attempt's Upstash-Retried.
	Message Message
	// FailedAt is when the last attempt failed.
	FailedAt time.Time
	// ResponseStatus is the last response's status, 0 when the last
	// attempt got no response.
	ResponseStatus int
	// ResponseHeader is the last response's header.
	ResponseHeader http.Header
	// ResponseBody is the last response's body, up to
	// Config.MaxResponseBytes.
	ResponseBody []byte
	// Error says why the last attempt failed.
	Error string
}

type dlqEntry struct {
	id       string
	seq      uint64
	msg      *message // fixed fields only are read
	retried  int
	failedAt time.Time
	status   int
	header   http.Header
	body     []byte
	errText  string
	size     int64 // the message's and the response's bytes, against MaxDLQBytes
}

func (e *dlqEntry) snapshot() DLQEntry {
	m := e.msg.snapshotFixed()
	m.Retried = e.retried
	m.State = StateFailed
	return DLQEntry{
		DLQID: e.id, Message: m, FailedAt: e.failedAt, ResponseStatus: e.status,
		ResponseHeader: e.header.Clone(), ResponseBody: append([]byte(nil), e.body...), Error: e.errText,
	}
}

// dlqStore keeps entries in failure order. Deletes are linear, which is fine
// at a dev server's DLQ sizes and keeps listing trivially ordered.
type dlqStore struct {
	entries  []*dlqEntry
	byID     map[string]*dlqEntry
	max      int
	maxBytes int64
	bytes    int64 // sum of the entries' size
	seq      uint64
}

// add keeps e, dropping the oldest entries while the count or the bytes
// would go beyond their bounds; e itself is kept even when it alone is
// over MaxDLQBytes, so the latest failure can always be inspected.
func (d *dlqStore) add(e *dlqEntry) {
	d.seq++
	e.seq = d.seq
	e.size = e.msg.size + int64(len(e.body)) + headerBytes(e.header)
	for len(d.entries) > 0 && (len(d.entries) >= d.max || d.bytes+e.size > d.maxBytes) {
		old := d.entries[0]
		delete(d.byID, old.id)
		d.bytes -= old.size
		d.entries[0] = nil
		d.entries = d.entries[1:]
	}
	d.entries = append(d.entries, e)
	d.byID[e.id] = e
	d.bytes += e.size
}

func (d *dlqStore) remove(id string) bool {
	e, ok := d.byID[id]
	if !ok {
		return false
	}
	delete(d.byID, id)
	d.bytes -= e.size
	for i, x := range d.entries {
		if x == e {
			d.entries = append(d.entries[:i], d.entries[i+1:]...)
			break
		}
	}
	return true
}

func (s *Server) dlqSeqNext() uint64 { return s.dlqIDs.Add(1) }

// DLQ returns the dead-letter queue, oldest failure first.
func (s *Server) DLQ() []DLQEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]DLQEntry, len(s.dlq.entries))
	for i, e := range s.dlq.entries {
		out[i] = e.snapshot()
	}
	return out
}

// RetryDLQ republishes a DLQ entry as a new message (new id, attempts start
// over) and removes the entry, as POST /v2/dlq/retry/{id} does.
func (s *Server) RetryDLQ(dlqID string) (messageID string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.retryDLQLocked(dlqID)
}

func (s *Server) retryDLQLocked(dlqID string) (string, bool) {
	e, ok := s.dlq.byID[dlqID]
	if !ok {
		return "", false
	}
	s.dlq.remove(dlqID)
	now := s.clock.Now()
	src := e.msg
	m := &message{
		id: s.ids.messageID(), url: src.url, group: src.group, endpointName: src.endpointName,
		queueName: src.queueName, method: src.method, header: src.header, body: src.body,
		maxRetries: src.maxRetries, retryDelay: src.retryDelay, timeout: src.timeout,
		createdAt: now, callerIP: src.callerIP, label: src.label,
		callback: src.callback, failureCallback: src.failureCallback,
		callbackOpts: src.callbackOpts, failureOpts: src.failureOpts,
		fcKey: src.fcKey, fcPar: src.fcPar, fcRate: src.fcRate, fcPeriod: src.fcPeriod,
		kind: src.kind, sourceMsgID: src.sourceMsgID, size: src.size,
	}
	if m.queueName != "" {
		// Not held to MaxQueues: the DLQ's own bound limits what a retry
		// can bring back.
		m.queue = s.queueLocked(m.queueName, now)
	}
	s.createLocked(m, now)
	return m.id, true
}

type wireDLQ struct {
	wireMessage
	DlqID              string      `json:"dlqId"`
	ResponseStatus     int         `json:"responseStatus,omitempty"`
	ResponseHeader     http.Header `json:"responseHeader,omitempty"`
	ResponseBody       string      `json:"responseBody,omitempty"`
	ResponseBodyBase64 string      `json:"responseBodyBase64,omitempty"`
	Error              string      `json:"error,omitempty"`
	FailedAt           int64       `json:"failedAt"`
}

func toWireDLQ(e DLQEntry) wireDLQ {
	w := wireDLQ{wireMessage: toWire(e.Message), DlqID: e.DLQID, ResponseStatus: e.ResponseStatus,
		ResponseHeader: e.ResponseHeader, Error: e.Error, FailedAt: e.FailedAt.UnixMilli()}
	w.ResponseBody, w.ResponseBodyBase64 = textOrBase64(e.ResponseBody)
	return w
}

// handleDLQList serves GET /v2/dlq (count ≤ 100, cursor, order
// earliestFirst|latestFirst, filters messageId, url, topicName, queueName,
// label, callerIp, responseStatus, fromDate, toDate) and DELETE /v2/dlq
// ({"dlqIds":[...]} → {"deleted": n}).
func (s *Server) handleDLQList(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
	case http.MethodDelete:
		var req struct {
			DlqIDs []string `json:"dlqIds"`
		}
		body, ok := s.readBody(w, r, 1<<20)
		if !ok {
			return
		}
		if err := json.Unmarshal(body, &req); err != nil {
			writeError(w, http.StatusBadRequest, "invalid JSON body: expected {\"dlqIds\":[...]}")
			return
		}
		n := 0
		s.mu.Lock()
		for _, id := range req.DlqIDs {
			if s.dlq.remove(id) {
				n++
			}
		}
		s.signalChangeLocked()
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]int{"deleted": n})
		return
	default:
		methodNotAllowed(w, http.MethodGet, http.MethodDelete)
		return
	}

	q := r.URL.Query()
	count, err := countParam(q.Get("count"), 100)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	from, to, err := dateRange(q.Get("fromDate"), q.Get("toDate"))
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
	status := 0
	if v := q.Get("responseStatus"); v != "" {
		if status, err = strconv.Atoi(v); err != nil {
			writeError(w, http.StatusBadRequest, "responseStatus must be an integer")
			return
		}
	}
	latest := false
	switch q.Get("order") {
	case "", "earliestFirst":
	case "latestFirst":
		latest = true
	default:
		writeError(w, http.StatusBadRequest, "order must be earliestFirst or latestFirst")
		return
	}
	match := func(e *dlqEntry) bool {
		m := e.msg
		return eq(q.Get("messageId"), m.id) && eq(q.Get("url"), m.url) &&
			eq(q.Get("topicName"), m.group) && eq(q.Get("queueName"), m.queueName) &&
			eq(q.Get("label"), m.label) && eq(q.Get("callerIp"), m.callerIP) &&
			(status == 0 || status == e.status) && inRange(e.failedAt, from, to)
	}

	resp := struct {
		Cursor   string    `json:"cursor,omitempty"`
		Messages []wireDLQ `json:"messages"`
	}{Messages: []wireDLQ{}}
	var picked []*dlqEntry
	s.mu.Lock()
	n := len(s.dlq.entries)
	for i := range n {
		e := s.dlq.entries[i]
		if latest {
			e = s.dlq.entries[n-1-i]
		}
		if cursor != 0 && (!latest && e.seq < cursor || latest && e.seq > cursor) {
			continue
		}
		if !match(e) {
			continue
		}
		if len(picked) == count {
			resp.Cursor = strconv.FormatUint(e.seq, 10)
			break
		}
		picked = append(picked, e)
	}
	snaps := make([]DLQEntry, len(picked))
	for i, e := range picked {
		snaps[i] = e.snapshot()
	}
	s.mu.Unlock()
	for _, e := range snaps {
		resp.Messages = append(resp.Messages, toWireDLQ(e))
	}
	writeJSON(w, http.StatusOK, resp)
}

// handleDLQEntry serves GET and DELETE /v2/dlq/{id}.
func (s *Server) handleDLQEntry(w http.ResponseWriter, r *http.Request, id string) {
	switch r.Method {
	case http.MethodGet:
		s.mu.Lock()
		e, ok := s.dlq.byID[id]
		var snap DLQEntry
		if ok {
			snap = e.snapshot()
		}
		s.mu.Unlock()
		if !ok {
			writeError(w, http.StatusNotFound, "dlq message "+id+" not found")
			return
		}
		writeJSON(w, http.StatusOK, toWireDLQ(snap))
	case http.MethodDelete:
		s.mu.Lock()
		ok := s.dlq.remove(id)
		s.signalChangeLocked()
		s.mu.Unlock()
		if !ok {
			writeError(w, http.StatusNotFound, "dlq message "+id+" not found")
			return
		}
		w.WriteHeader(http.StatusOK)
	default:
		methodNotAllowed(w, http.MethodGet, http.MethodDelete)
	}
}

// handleDLQRetry serves POST /v2/dlq/retry/{id} → 201 {"messageId"} and
// POST /v2/dlq/retry with {"dlqIds":[...]} → {"responses":[{"messageId"}]}.
func (s *Server) handleDLQRetry(w http.ResponseWriter, r *http.Request, id string) {
	if r.Method != http.MethodPost {
		methodNotAllowed(w, http.MethodPost)
		return
	}
	if id != "" {
		msgID, ok := s.RetryDLQ(id)
		if !ok {
			writeError(w, http.StatusNotFound, "dlq message "+id+" not found")
			return
		}
		writeJSON(w, http.StatusCreated, map[string]string{"messageId": msgID})
		return
	}
	var req struct {
		DlqIDs []string `json:"dlqIds"`
	}
	body, ok := s.readBody(w, r, 1<<20)
	if !ok {
		return
	}
	if err := json.Unmarshal(body, &req); err != nil || len(req.DlqIDs) == 0 {
		writeError(w, http.StatusBadRequest, "invalid JSON body: expected {\"dlqIds\":[...]}")
		return
	}
	type result struct {
		MessageID string `json:"messageId,omitempty"`
		Error     string `json:"error,omitempty"`
	}
	out := struct {
		Responses []result `json:"responses"`
	}{}
	s.mu.Lock()
	for _, id := range req.DlqIDs {
		if msgID, ok := s.retryDLQLocked(id); ok {
			out.Responses = append(out.Responses, result{MessageID: msgID})
		} else {
			out.Responses = append(out.Responses, result{Error: "dlq message " + id + " not found"})
		}
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, out)
}
