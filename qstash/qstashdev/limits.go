package qstashdev

import (
	"fmt"
	"net/http"
	"time"
)

// Everything qstashdev holds lives in memory, and a dev server is left
// running for days, fed load tests and delayed messages: every collection
// a client can grow has a bound. The event log, the DLQ and the
// deduplication index forget their oldest entries; pending messages cannot
// be forgotten, so a publish beyond their bounds is refused instead, with
// the 429 a publisher already backs off from.

// pendingRetryAfter is the Retry-After of a refusal for a full server, in
// seconds: pending messages drain at the destinations' pace, which the
// server cannot predict, and a second is about one batch of a busy relay.
const pendingRetryAfter = "1"

// headerBytes is what a header map holds in names and values.
func headerBytes(h http.Header) int64 {
	var n int64
	for k, vs := range h {
		for _, v := range vs {
			n += int64(len(k) + len(v))
		}
	}
	return n
}

// messageSize is what a pending message counts against MaxPendingBytes,
// apart from its destination URL (a URL-group publish shares everything
// else between its endpoints' messages): the body, the headers, and the
// strings kept for callbacks, events and flow control.
func messageSize(body []byte, h http.Header, strs ...string) int64 {
	n := int64(len(body)) + headerBytes(h)
	for _, s := range strs {
		n += int64(len(s))
	}
	return n
}

// Lengths of the strings a message keeps besides its body and headers.
// Each lands in the event log, the DLQ or the deduplication index, which
// bound their entries by count: without these, 10,000 events could hold a
// megabyte of label each.
const (
	maxURLBytes    = 16 << 10 // destination, callback and endpoint URLs
	maxOptionBytes = 4 << 10  // label, deduplication id, flow-control key
)

// maxGroupEndpoints bounds the endpoints of a URL group: each publish to
// the group creates a message per endpoint.
const maxGroupEndpoints = 1000

// checkLen refuses a string longer than max bytes.
func checkLen(what, v string, max int) *apiError {
	if len(v) > max {
		return badRequest("%s is longer than %d bytes", what, max)
	}
	return nil
}

// limitReached is QStash's answer to a plan limit on queues or groups.
func limitReached(format string, args ...any) *apiError {
	return &apiError{status: http.StatusPreconditionFailed, msg: fmt.Sprintf(format, args...)}
}

// newQueueAllowedLocked reports whether a queue named name may be used:
// it exists, or one more fits within MaxQueues (extra counts queues a
// batch is about to create).
func (s *Server) newQueueAllowedLocked(name string, extra int) *apiError {
	if _, ok := s.queues[name]; ok || len(s.queues)+extra < s.cfg.MaxQueues {
		return nil
	}
	return limitReached("queue %q not created: the server holds %d queues, its limit (Config.MaxQueues); delete one with DELETE /v2/queues/<name>, or reuse one", name, s.cfg.MaxQueues)
}

// reservePendingLocked checks that n more messages holding bytes in all
// fit within MaxPendingMessages and MaxPendingBytes. createLocked does
// the accounting; this only decides.
func (s *Server) reservePendingLocked(n int, bytes int64) *apiError {
	if n == 0 {
		return nil
	}
	if s.pending+n > s.cfg.MaxPendingMessages {
		return pendingFull(fmt.Sprintf("too many pending messages: %d are waiting for delivery and %d more would exceed the limit of %d (Config.MaxPendingMessages); retry once some are delivered",
			s.pending, n, s.cfg.MaxPendingMessages))
	}
	if s.pendingBytes+bytes > s.cfg.MaxPendingBytes {
		return pendingFull(fmt.Sprintf("pending messages hold too many bytes: %d are waiting for delivery and %d more would exceed the limit of %d (Config.MaxPendingBytes); retry once some are delivered",
			s.pendingBytes, bytes, s.cfg.MaxPendingBytes))
	}
	return nil
}

// targetsBytes is what the messages of sp to targets hold in all.
func targetsBytes(sp *publishSpec, targets []Endpoint) int64 {
	n := int64(len(targets)) * sp.size
	for _, t := range targets {
		n += int64(len(t.URL))
	}
	return n
}

func pendingFull(msg string) *apiError {
	h := http.Header{}
	h.Set("Retry-After", pendingRetryAfter)
	return &apiError{status: http.StatusTooManyRequests, msg: msg, header: h}
}

// reserveBatchLocked checks a whole batch against the pending bounds, so a
// batch is taken or refused whole: a relay that had half of its batch
// accepted would have to sort out which half. It counts what submitLocked
// will create: one message per URL, one per endpoint of a known group, and
// none for an element deduplicated by an earlier message or element, or
// refused for a queue beyond MaxQueues.
func (s *Server) reserveBatchLocked(specs []*publishSpec, now time.Time) *apiError {
	var (
		n         int
		bytes     int64
		seen      map[string]bool
		newQueues map[string]bool
	)
	for _, sp := range specs {
		if sp == nil {
			continue
		}
		if sp.dedupKey != "" {
			if seen[sp.dedupKey] || s.dedup.get(sp.dedupKey, now) != nil {
				continue
			}
		}
		if sp.queue != "" && !newQueues[sp.queue] {
			if s.newQueueAllowedLocked(sp.queue, len(newQueues)) != nil {
				continue
			}
			if s.queues[sp.queue] == nil {
				if newQueues == nil {
					newQueues = make(map[string]bool)
				}
				newQueues[sp.queue] = true
			}
		}
		if sp.dedupKey != "" {
			if seen == nil {
				seen = make(map[string]bool)
			}
			seen[sp.dedupKey] = true
		}
		targets := []Endpoint{{URL: sp.dest}}
		if !sp.isURL {
			targets = nil
			if g := s.groups[sp.dest]; g != nil {
				targets = g.endpoints
			}
		}
		n += len(targets)
		bytes += targetsBytes(sp, targets)
	}
	if n == 0 {
		return nil
	}
	if s.pending+n > s.cfg.MaxPendingMessages || s.pendingBytes+bytes > s.cfg.MaxPendingBytes {
		return pendingFull(fmt.Sprintf("batch refused: %d messages of %d bytes would join %d pending messages of %d bytes, beyond the limits of %d messages (Config.MaxPendingMessages) and %d bytes (Config.MaxPendingBytes); retry once some are delivered",
			n, bytes, s.pending, s.pendingBytes, s.cfg.MaxPendingMessages, s.cfg.MaxPendingBytes))
	}
	return nil
}
