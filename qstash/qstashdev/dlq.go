package qstashdev

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
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
		createdAt: now, callerIP: src.callerIP, label: src.label, labels: src.labels,
		scheduleID: src.scheduleID, redact: src.redact,
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

// dlqFilters are the DLQ's filters, per the API reference. host and path
// are not among them: the DLQ endpoints refuse them.
var dlqFilters = []string{"messageId", "url", "topicName", "urlGroup", "scheduleId", "queueName",
	"label", "flowControlKey", "callerIp", "callerIP", "responseStatus"}

// record is what filters see of a DLQ entry; its time is the failure.
func (e *dlqEntry) record() *record {
	r := e.msg.record()
	r.status, r.at = e.status, e.failedAt
	return r
}

// dlqSelection is the DLQ entries a list or bulk request names: by dlqIds
// (every one of them, in the order given), or else by filters, one page of
// count at a time from cursor.
type dlqSelection struct {
	byID    bool
	ids     []string
	missing []string // named dlqIds the DLQ does not hold
	entries []*dlqEntry
	cursor  string // where the next page starts, "" at the end
}

// selectDLQLocked picks the entries of a request. strict refuses unknown
// query parameters, for the destructive requests.
func (s *Server) selectDLQLocked(q url.Values, ids []string, byID bool, strict bool) (*dlqSelection, *apiError) {
	sel := &dlqSelection{byID: byID, ids: ids}
	if byID {
		for _, id := range ids {
			if e, ok := s.dlq.byID[id]; ok {
				sel.entries = append(sel.entries, e)
			} else {
				sel.missing = append(sel.missing, id)
			}
		}
		return sel, nil
	}
	if strict {
		for _, p := range []string{"host", "path"} {
			if q.Has(p) {
				return nil, badRequest("the DLQ cannot be filtered by %s: use url", p)
			}
		}
	}
	f, aerr := parseFilters(q, dlqFilters, "dlqIds", strict)
	if aerr != nil {
		return nil, aerr
	}
	count, err := countParam(q.Get("count"), 100)
	if err != nil {
		return nil, badRequest("%v", err)
	}
	var cursor uint64
	if c := q.Get("cursor"); c != "" {
		if cursor, err = strconv.ParseUint(c, 10, 64); err != nil {
			return nil, badRequest("invalid cursor: pass back the cursor of a previous answer")
		}
	}
	latest := false
	switch q.Get("order") {
	case "", "earliestFirst":
	case "latestFirst":
		latest = true
	default:
		return nil, badRequest("order must be earliestFirst or latestFirst")
	}
	n := len(s.dlq.entries)
	for i := range n {
		e := s.dlq.entries[i]
		if latest {
			e = s.dlq.entries[n-1-i]
		}
		if cursor != 0 && (!latest && e.seq < cursor || latest && e.seq > cursor) {
			continue
		}
		if !f.match(e.record()) {
			continue
		}
		if len(sel.entries) == count {
			sel.cursor = strconv.FormatUint(e.seq, 10)
			break
		}
		sel.entries = append(sel.entries, e)
	}
	return sel, nil
}

// handleDLQList serves GET /v2/dlq (count ≤ 100, cursor, order
// earliestFirst|latestFirst, dlqIds, and the filters of dlqFilters with
// fromDate and toDate) and DELETE /v2/dlq, the bulk delete → {"deleted": n,
// "cursor"?}: the entries named by dlqIds (query parameters, or a JSON
// body {"dlqIds": [...]}), else those matching the filters, else all, a
// page of count (100) at a time.
func (s *Server) handleDLQList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	switch r.Method {
	case http.MethodGet:
		ids, byID, ok := s.bulkIDs(w, r, "dlqIds")
		if !ok {
			return
		}
		s.mu.Lock()
		sel, aerr := s.selectDLQLocked(q, ids, byID, false)
		var snaps []DLQEntry
		if aerr == nil {
			snaps = make([]DLQEntry, len(sel.entries))
			for i, e := range sel.entries {
				snaps[i] = e.snapshot()
			}
		}
		s.mu.Unlock()
		if aerr != nil {
			writeAPIError(w, aerr)
			return
		}
		resp := struct {
			Cursor   string    `json:"cursor,omitempty"`
			Messages []wireDLQ `json:"messages"`
		}{Cursor: sel.cursor, Messages: make([]wireDLQ, 0, len(snaps))}
		for _, e := range snaps {
			resp.Messages = append(resp.Messages, toWireDLQ(e))
		}
		writeJSON(w, http.StatusOK, resp)
	case http.MethodDelete:
		ids, byID, ok := s.bulkIDs(w, r, "dlqIds")
		if !ok {
			return
		}
		s.mu.Lock()
		sel, aerr := s.selectDLQLocked(q, ids, byID, true)
		if aerr == nil {
			for _, e := range sel.entries {
				s.dlq.remove(e.id)
			}
			s.signalChangeLocked()
		}
		s.mu.Unlock()
		if aerr != nil {
			writeAPIError(w, aerr)
			return
		}
		writeJSON(w, http.StatusOK, struct {
			Deleted int    `json:"deleted"`
			Cursor  string `json:"cursor,omitempty"`
		}{len(sel.entries), sel.cursor})
	default:
		methodNotAllowed(w, http.MethodGet, http.MethodDelete)
	}
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
// the bulk retry POST /v2/dlq/retry → 201 {"responses": [{"messageId"}],
// "cursor"?}, which selects entries as the bulk delete does. A dlqId the
// DLQ does not hold answers 404 and retries nothing.
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
	ids, byID, ok := s.bulkIDs(w, r, "dlqIds")
	if !ok {
		return
	}
	type result struct {
		MessageID string `json:"messageId"`
	}
	out := struct {
		Cursor    string   `json:"cursor,omitempty"`
		Responses []result `json:"responses"`
	}{Responses: []result{}}
	s.mu.Lock()
	sel, aerr := s.selectDLQLocked(r.URL.Query(), ids, byID, true)
	if aerr == nil && len(sel.missing) > 0 {
		aerr = &apiError{status: http.StatusNotFound, msg: "dlq messages not found: " + strings.Join(sel.missing, ", ") + "; nothing was retried"}
	}
	if aerr == nil {
		out.Cursor = sel.cursor
		for _, e := range sel.entries {
			msgID, _ := s.retryDLQLocked(e.id)
			out.Responses = append(out.Responses, result{MessageID: msgID})
		}
	}
	s.mu.Unlock()
	if aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	writeJSON(w, http.StatusCreated, out)
}
