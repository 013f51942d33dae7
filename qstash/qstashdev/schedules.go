package qstashdev

import (
	"net/http"
	"sort"
	"strings"
	"time"
)

// Schedules publish a message each time their cron expression fires: the
// same message as a publish with the schedule's headers and body would
// create, with Upstash-Schedule-Id on every delivery and scheduleId in the
// log, signed like any other. They run on the server's Clock, so a test
// with a fake clock fires them by advancing it. A schedule fires once per
// due time: if the clock jumps past several, it fires once, at the jump,
// and then at the next time after it (QStash does not catch up on missed
// runs either). A paused schedule ignores its due times.

// Schedule is a snapshot of a schedule.
type Schedule struct {
	// ID is the schedule's id: Upstash-Schedule-Id if the creator chose
	// one, else "scd_...".
	ID string
	// Cron is the Upstash-Cron expression, as given.
	Cron string
	// Destination is the URL or URL group scheduled messages go to.
	Destination string
	// Queue is Upstash-Queue-Name, the queue they are enqueued to, if any.
	Queue string
	// Method, Header, Body, Retries, Delay, Callback, FailureCallback,
	// Labels and the flow-control fields are those of the messages it
	// publishes.
	Method          string
	Header          http.Header
	Body            []byte
	Retries         int
	Delay           time.Duration
	Callback        string
	FailureCallback string
	Labels          []string
	FlowControlKey  string
	Parallelism     int
	Rate            int
	Period          time.Duration
	// Paused schedules skip their due times.
	Paused bool
	// CreatedAt is when the schedule was created; an update keeps it.
	CreatedAt time.Time
	// LastScheduleTime is when it last fired (zero: never).
	LastScheduleTime time.Time
	// NextScheduleTime is when it fires next.
	NextScheduleTime time.Time
	// LastScheduleStates maps the messages of its last run to IN_PROGRESS,
	// SUCCESS or FAIL.
	LastScheduleStates map[string]string
	// CallerIP is the address of the client that created it.
	CallerIP string
}

type schedule struct {
	id         string
	cron       *cronSpec
	spec       *publishSpec // everything a run publishes
	createdAt  time.Time
	paused     bool
	deleted    bool
	next, last time.Time
	lastStates map[string]string
}

// Schedule message states in lastScheduleStates.
const (
	scheduleInProgress = "IN_PROGRESS"
	scheduleSuccess    = "SUCCESS"
	scheduleFail       = "FAIL"
)

func (sc *schedule) snapshot() Schedule {
	sp := sc.spec
	out := Schedule{
		ID: sc.id, Cron: sc.cron.src, Destination: sp.dest, Queue: sp.queue, Method: sp.method,
		Header: sp.header.Clone(), Body: append([]byte(nil), sp.body...), Retries: sp.maxRetries,
		Delay: sp.delay, Callback: sp.callback, FailureCallback: sp.failureCB,
		Labels: append([]string(nil), sp.labels...), FlowControlKey: sp.fcKey, Parallelism: sp.fcPar,
		Rate: sp.fcRate, Paused: sc.paused, CreatedAt: sc.createdAt, LastScheduleTime: sc.last,
		NextScheduleTime: sc.next, CallerIP: sp.callerIP, LastScheduleStates: map[string]string{},
	}
	if sp.fcKey != "" {
		out.Period = sp.fcPeriod
	}
	for k, v := range sc.lastStates {
		out.LastScheduleStates[k] = v
	}
	return out
}

// Schedules returns the schedules, by id.
func (s *Server) Schedules() []Schedule {
	s.mu.Lock()
	out := make([]Schedule, 0, len(s.schedules))
	for _, sc := range s.schedules {
		out = append(out, sc.snapshot())
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// armScheduleLocked sets the schedule's next due time after now and puts
// it in the timer heap.
func (s *Server) armScheduleLocked(sc *schedule, now time.Time) {
	sc.next = sc.cron.next(now)
	if !sc.next.IsZero() {
		s.pushTimerLocked(timerItem{at: sc.next, sc: sc})
	}
}

// fireScheduleLocked runs a schedule whose heap entry for at is due.
func (s *Server) fireScheduleLocked(sc *schedule, at, now time.Time) {
	if sc.deleted || !at.Equal(sc.next) || s.schedules[sc.id] != sc {
		return // deleted, or replaced by an update with a heap entry of its own
	}
	if !sc.paused {
		sp := *sc.spec
		sp.scheduleID, sp.dedupKey = sc.id, ""
		res, _, aerr := s.submitLocked(&sp, now)
		if aerr != nil {
			s.log.Warn("qstashdev: a schedule could not publish", "schedule_id", sc.id, "destination", sp.dest, "error", aerr.msg)
		}
		sc.last = now
		sc.lastStates = make(map[string]string, len(res))
		for _, r := range res {
			sc.lastStates[r.MessageID] = scheduleInProgress
		}
	}
	s.armScheduleLocked(sc, now)
	s.signalChangeLocked()
}

// noteScheduledLocked follows a scheduled message into its schedule's
// lastScheduleStates.
func (s *Server) noteScheduledLocked(m *message, state string) {
	sc := s.schedules[m.scheduleID]
	if sc == nil {
		return
	}
	if _, ok := sc.lastStates[m.id]; !ok {
		return
	}
	switch state {
	case StateDelivered:
		sc.lastStates[m.id] = scheduleSuccess
	case StateFailed, StateCancelled:
		sc.lastStates[m.id] = scheduleFail
	}
}

type wireSchedule struct {
	ScheduleID           string            `json:"scheduleId"`
	Cron                 string            `json:"cron"`
	CreatedAt            int64             `json:"createdAt"`
	Destination          string            `json:"destination"`
	Method               string            `json:"method"`
	Header               http.Header       `json:"header,omitempty"`
	Body                 string            `json:"body,omitempty"`
	BodyBase64           string            `json:"bodyBase64,omitempty"`
	Retries              int               `json:"retries"`
	Delay                int64             `json:"delay,omitempty"` // seconds
	Callback             string            `json:"callback,omitempty"`
	FailureCallback      string            `json:"failureCallback,omitempty"`
	CallerIP             string            `json:"callerIP,omitempty"`
	CallerIPCamel        string            `json:"callerIp,omitempty"` // the API reference's spelling
	IsPaused             bool              `json:"isPaused"`
	QueueName            string            `json:"queueName,omitempty"`
	FlowControlKey       string            `json:"flowControlKey,omitempty"`
	Parallelism          int               `json:"parallelism,omitempty"`
	Rate                 int               `json:"rate,omitempty"`
	Period               int64             `json:"period,omitempty"` // seconds
	RetryDelayExpression string            `json:"retryDelayExpression,omitempty"`
	Timeout              int64             `json:"timeout,omitempty"` // seconds
	Label                string            `json:"label,omitempty"`
	Labels               []string          `json:"labels,omitempty"`
	LastScheduleTime     int64             `json:"lastScheduleTime,omitempty"`
	NextScheduleTime     int64             `json:"nextScheduleTime,omitempty"`
	LastScheduleStates   map[string]string `json:"lastScheduleStates,omitempty"`
	RedactFields         []string          `json:"redactFields,omitempty"`
}

func (sc *schedule) wire() wireSchedule {
	sp := sc.spec
	w := wireSchedule{
		ScheduleID: sc.id, Cron: sc.cron.src, CreatedAt: sc.createdAt.UnixMilli(), Destination: sp.dest,
		Method: sp.method, Header: sc.spec.redact.header(sp.header.Clone()), Retries: sp.maxRetries,
		Delay: int64(sp.delay / time.Second), Callback: sp.callback, FailureCallback: sp.failureCB,
		CallerIP: sp.callerIP, CallerIPCamel: sp.callerIP, IsPaused: sc.paused, QueueName: sp.queue,
		FlowControlKey: sp.fcKey, Parallelism: sp.fcPar, Rate: sp.fcRate,
		Timeout: int64(sp.timeout / time.Second), Label: firstLabel(sp.labels), Labels: sp.labels,
		RedactFields: sp.redact.fields(),
	}
	if sp.fcKey != "" {
		w.Period = int64(sp.fcPeriod / time.Second)
	}
	if sp.retryDelay != nil {
		w.RetryDelayExpression = sp.retryDelay.src
	}
	w.Body, w.BodyBase64 = textOrBase64(sp.body)
	if sp.redact.body {
		w.Body, w.BodyBase64 = redacted(sp.body), ""
	}
	if !sc.last.IsZero() {
		w.LastScheduleTime = sc.last.UnixMilli()
	}
	if !sc.next.IsZero() {
		w.NextScheduleTime = sc.next.UnixMilli()
	}
	if len(sc.lastStates) > 0 {
		w.LastScheduleStates = make(map[string]string, len(sc.lastStates))
		for k, v := range sc.lastStates {
			w.LastScheduleStates[k] = v
		}
	}
	return w
}

// handleScheduleCreate serves POST /v2/schedules/{destination}: Upstash-Cron
// is required; Upstash-Schedule-Id chooses the id (and updates the
// schedule of that id, keeping its creation time); Upstash-Queue-Name
// enqueues the runs' messages; every publish header applies to them, but
// deduplication, which a repeating message cannot use, and
// Upstash-Not-Before. Answers 200 {"scheduleId"}.
func (s *Server) handleScheduleCreate(w http.ResponseWriter, r *http.Request, dest string) {
	cronSrc := r.Header.Get("Upstash-Cron")
	cron, err := parseCron(cronSrc)
	if err != nil {
		writeError(w, http.StatusBadRequest, "Upstash-Cron: "+err.Error())
		return
	}
	id := r.Header.Get("Upstash-Schedule-Id")
	if id != "" && !validName(id) {
		writeError(w, http.StatusBadRequest, "invalid Upstash-Schedule-Id "+id+": use letters, digits, '-', '_' and '.'")
		return
	}
	body, ok := s.readBody(w, r, s.cfg.MaxBodyBytes)
	if !ok {
		return
	}
	sp, aerr := parseSpec(r.Header, body, dest, r.Header.Get("Upstash-Queue-Name"), callerIP(r))
	if aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	sp.dedupKey, sp.notBefore = "", time.Time{}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	old := s.schedules[id]
	if old == nil && len(s.schedules) >= s.cfg.MaxSchedules {
		writeAPIError(w, limitReached("schedule not created: the server holds %d schedules, its limit (Config.MaxSchedules); delete one with DELETE /v2/schedules/<id>", s.cfg.MaxSchedules))
		return
	}
	if id == "" {
		id = s.ids.scheduleID()
	}
	sc := &schedule{id: id, cron: cron, spec: sp, createdAt: now}
	if old != nil {
		old.deleted = true
		sc.createdAt, sc.paused, sc.last, sc.lastStates = old.createdAt, old.paused, old.last, old.lastStates
	}
	s.schedules[id] = sc
	s.armScheduleLocked(sc, now)
	s.signalChangeLocked()
	writeJSON(w, http.StatusOK, map[string]string{"scheduleId": id})
}

// handleSchedules serves GET /v2/schedules, GET and DELETE
// /v2/schedules/{id}, and POST or PATCH /v2/schedules/{id}/pause|resume
// (the API reference says POST, the SDKs send PATCH).
func (s *Server) handleSchedules(w http.ResponseWriter, r *http.Request, seg []string) {
	switch {
	case len(seg) == 1:
		if r.Method != http.MethodGet {
			methodNotAllowed(w, http.MethodGet)
			return
		}
		s.mu.Lock()
		out := make([]wireSchedule, 0, len(s.schedules))
		for _, sc := range s.schedules {
			out = append(out, sc.wire())
		}
		s.mu.Unlock()
		sort.Slice(out, func(i, j int) bool { return out[i].ScheduleID < out[j].ScheduleID })
		writeJSON(w, http.StatusOK, out)
		return
	case len(seg) > 3:
		writeError(w, http.StatusNotFound, "unknown path: schedules are /v2/schedules/<id>[/pause|/resume]")
		return
	}
	id := seg[1]
	s.mu.Lock()
	defer s.mu.Unlock()
	sc := s.schedules[id]
	if sc == nil {
		writeError(w, http.StatusNotFound, "schedule "+id+" not found")
		return
	}
	if len(seg) == 3 {
		action := seg[2]
		if action != "pause" && action != "resume" {
			writeError(w, http.StatusNotFound, "unknown schedule action "+action+": use pause or resume")
			return
		}
		if r.Method != http.MethodPost && r.Method != http.MethodPatch {
			methodNotAllowed(w, http.MethodPost, http.MethodPatch)
			return
		}
		sc.paused = action == "pause"
		s.signalChangeLocked()
		w.WriteHeader(http.StatusOK)
		return
	}
	switch r.Method {
	case http.MethodGet:
		writeJSON(w, http.StatusOK, sc.wire())
	case http.MethodDelete:
		sc.deleted = true
		delete(s.schedules, id)
		s.signalChangeLocked()
		w.WriteHeader(http.StatusOK)
	default:
		methodNotAllowed(w, http.MethodGet, http.MethodDelete)
	}
}

// isScheduleCreate tells a create (POST with Upstash-Cron, whose path
// holds a destination) from the other schedule requests.
func isScheduleCreate(r *http.Request) bool {
	return r.Method == http.MethodPost && r.Header.Get("Upstash-Cron") != ""
}

// schedulesSegment matches the first path segment case-insensitively: the
// Go SDK v1.0.0 creates and gets schedules under /v2/Schedules/.
func schedulesSegment(rest string) (string, bool) {
	head, tail, _ := strings.Cut(rest, "/")
	if !strings.EqualFold(head, "schedules") {
		return "", false
	}
	return tail, true
}
