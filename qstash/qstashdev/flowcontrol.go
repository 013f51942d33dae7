package qstashdev

import (
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The flow-control management API: the state of each key, pause and
// resume, pinned limits that override the ones messages bring, and a reset
// of the rate window. A key exists while messages use it; a paused or
// pinned key is kept when idle too, so its setting outlives its messages.

// FlowControlInfo is the state of a flow-control key, as GET
// /v2/flowControl/{key} answers it.
type FlowControlInfo struct {
	// Key is the Upstash-Flow-Control-Key.
	Key string
	// WaitListSize counts messages waiting for the key's limits.
	WaitListSize int
	// ParallelismMax is the parallelism limit (0: none); ParallelismCount
	// the attempts in flight.
	ParallelismMax, ParallelismCount int
	// RateMax is the rate limit per RatePeriod (0: none); RateCount the
	// attempts started in the current window, which began at
	// RatePeriodStart.
	RateMax, RateCount int
	RatePeriod         time.Duration
	RatePeriodStart    time.Time
	// Paused keys start no attempt.
	Paused bool
	// PinnedParallelism and PinnedRate report limits pinned through the
	// API, which messages' Upstash-Flow-Control-Value no longer changes.
	PinnedParallelism, PinnedRate bool
}

func (f *flowKey) info(now time.Time) FlowControlInfo {
	n := 0
	f.waiting.each(func(m *message) {
		if m.state == stWaitingFC && m.fc == f {
			n++
		}
	})
	in := FlowControlInfo{Key: f.key, WaitListSize: n, ParallelismMax: f.parallelism, ParallelismCount: f.active,
		RateMax: f.rate, RatePeriod: f.period, Paused: f.paused, PinnedParallelism: f.pinnedPar, PinnedRate: f.pinnedRate}
	if f.rate > 0 && !f.windowStart.IsZero() && !f.windowOver(now) {
		in.RateCount, in.RatePeriodStart = f.windowCount, f.windowStart
	}
	return in
}

// FlowControlKeys returns the state of every flow-control key, by key.
func (s *Server) FlowControlKeys() []FlowControlInfo {
	s.mu.Lock()
	now := s.clock.Now()
	out := make([]FlowControlInfo, 0, len(s.flows))
	for _, f := range s.flows {
		out = append(out, f.info(now))
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

type wireFlowControl struct {
	FlowControlKey      string `json:"flowControlKey"`
	WaitListSize        int    `json:"waitListSize"`
	ParallelismMax      int    `json:"parallelismMax"`
	ParallelismCount    int    `json:"parallelismCount"`
	RateMax             int    `json:"rateMax"`
	RateCount           int    `json:"rateCount"`
	RatePeriod          int64  `json:"ratePeriod"`      // seconds
	RatePeriodStart     int64  `json:"ratePeriodStart"` // unix seconds
	IsPaused            bool   `json:"isPaused"`
	IsPinnedParallelism bool   `json:"isPinnedParallelism"`
	IsPinnedRate        bool   `json:"isPinnedRate"`
}

func (in FlowControlInfo) wire() wireFlowControl {
	w := wireFlowControl{FlowControlKey: in.Key, WaitListSize: in.WaitListSize, ParallelismMax: in.ParallelismMax,
		ParallelismCount: in.ParallelismCount, RateMax: in.RateMax, RateCount: in.RateCount,
		RatePeriod: int64(in.RatePeriod / time.Second), IsPaused: in.Paused,
		IsPinnedParallelism: in.PinnedParallelism, IsPinnedRate: in.PinnedRate}
	if !in.RatePeriodStart.IsZero() {
		w.RatePeriodStart = in.RatePeriodStart.Unix()
	}
	return w
}

// flowControlActions are the POST /v2/flowControl/{key}/<action> paths.
var flowControlActions = []string{"pause", "resume", "pin", "unpin", "resetRate"}

// handleFlowControl serves GET /v2/flowControl (every key), GET
// /v2/flowControl/{key}, and POST /v2/flowControl/{key}/pause, resume,
// pin (?parallelism=&rate=&period=<seconds>), unpin
// (?parallelism=true&rate=true) and resetRate. rest is the escaped path
// after /v2/flowControl. Keys may hold slashes (the publisher's default
// key is the aggregate, "order/o-1"), which the SDKs send unescaped, so the
// action is read from the end of the path.
func (s *Server) handleFlowControl(w http.ResponseWriter, r *http.Request, rest string) {
	rest = strings.TrimPrefix(rest, "/")
	if rest == "" {
		if r.Method != http.MethodGet {
			methodNotAllowed(w, http.MethodGet)
			return
		}
		keys := s.FlowControlKeys()
		out := make([]wireFlowControl, len(keys))
		for i, k := range keys {
			out[i] = k.wire()
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	action := ""
	for _, a := range flowControlActions {
		if k, ok := strings.CutSuffix(rest, "/"+a); ok {
			rest, action = k, a
			break
		}
	}
	key, err := url.PathUnescape(rest)
	if err != nil || key == "" {
		writeError(w, http.StatusBadRequest, "missing or malformed flow-control key in the path")
		return
	}
	if action == "" {
		if r.Method != http.MethodGet {
			methodNotAllowed(w, http.MethodGet)
			return
		}
		s.mu.Lock()
		f := s.flows[key]
		var in FlowControlInfo
		if f != nil {
			in = f.info(s.clock.Now())
		}
		s.mu.Unlock()
		if f == nil {
			writeError(w, http.StatusNotFound, "flow-control key "+strconv.Quote(key)+" not found: a key exists while messages use it, or once paused or pinned")
			return
		}
		writeJSON(w, http.StatusOK, in.wire())
		return
	}
	if r.Method != http.MethodPost {
		methodNotAllowed(w, http.MethodPost)
		return
	}
	if aerr := checkLen("flow-control key", key, maxOptionBytes); aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	q := r.URL.Query()
	var pin struct {
		par, rate, period   int
		hasPar, hasRate     bool
		unpinPar, unpinRate bool
	}
	intParam := func(name string) (int, bool, bool) {
		v := q.Get(name)
		if v == "" {
			return 0, false, true
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, name+" must be a non-negative integer, got "+strconv.Quote(v))
			return 0, false, false
		}
		return n, true, true
	}
	switch action {
	case "pin":
		var ok bool
		if pin.par, pin.hasPar, ok = intParam("parallelism"); !ok {
			return
		}
		if pin.rate, pin.hasRate, ok = intParam("rate"); !ok {
			return
		}
		if pin.period, _, ok = intParam("period"); !ok {
			return
		}
		if !pin.hasPar && !pin.hasRate {
			writeError(w, http.StatusBadRequest, "pin needs parallelism, rate or both")
			return
		}
	case "unpin":
		pin.unpinPar = q.Get("parallelism") == "true"
		pin.unpinRate = q.Get("rate") == "true"
	}

	s.mu.Lock()
	now := s.clock.Now()
	f := s.flows[key]
	if f == nil {
		if action != "pause" && action != "pin" {
			s.mu.Unlock()
			writeError(w, http.StatusNotFound, "flow-control key "+strconv.Quote(key)+" not found")
			return
		}
		f = &flowKey{key: key, period: time.Second}
		s.flows[key] = f
	}
	switch action {
	case "pause":
		f.paused = true
	case "resume":
		f.paused = false
	case "pin":
		if pin.hasPar {
			f.parallelism, f.pinnedPar = pin.par, true
		}
		if pin.hasRate {
			f.rate, f.pinnedRate = pin.rate, true
			if pin.period > 0 {
				f.period = time.Duration(pin.period) * time.Second
			}
		}
		// Pinning resets the key's rate state, as in QStash.
		f.windowStart, f.windowCount = now, 0
	case "unpin":
		if pin.unpinPar {
			f.pinnedPar = false
		}
		if pin.unpinRate {
			f.pinnedRate = false
		}
	case "resetRate":
		f.windowStart, f.windowCount = now, 0
	}
	s.drainFlowLocked(f, now)
	s.pruneFlowLocked(f, now)
	s.signalChangeLocked()
	s.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// handleGlobalParallelism serves GET /v2/globalParallelism: the server's
// Concurrency and the attempts in flight.
func (s *Server) handleGlobalParallelism(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		methodNotAllowed(w, http.MethodGet)
		return
	}
	s.mu.Lock()
	n := s.inflight
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]int{"parallelismMax": s.cfg.Concurrency, "parallelismCount": n})
}
