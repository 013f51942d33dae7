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

// messageSize is what a pending message counts against MaxPendingBytes.
func messageSize(body []byte, h http.Header) int64 {
	return int64(len(body)) + headerBytes(h)
}

// reservePendingLocked checks that n more messages of size bytes each fit
// within MaxPendingMessages and MaxPendingBytes. createLocked does the
// accounting; this only decides.
func (s *Server) reservePendingLocked(n int, size int64) *apiError {
	if n == 0 {
		return nil
	}
	if s.pending+n > s.cfg.MaxPendingMessages {
		return pendingFull(fmt.Sprintf("too many pending messages: %d are waiting for delivery and %d more would exceed the limit of %d (Config.MaxPendingMessages); retry once some are delivered",
			s.pending, n, s.cfg.MaxPendingMessages))
	}
	if s.pendingBytes+int64(n)*size > s.cfg.MaxPendingBytes {
		return pendingFull(fmt.Sprintf("pending messages hold too many bytes: %d are waiting for delivery and %d more would exceed the limit of %d (Config.MaxPendingBytes); retry once some are delivered",
			s.pendingBytes, int64(n)*size, s.cfg.MaxPendingBytes))
	}
	return nil
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
// none for an element deduplicated by an earlier message or element.
func (s *Server) reserveBatchLocked(specs []*publishSpec, now time.Time) *apiError {
	var (
		n     int
		bytes int64
		seen  map[string]bool
	)
	for _, sp := range specs {
		if sp == nil {
			continue
		}
		if sp.dedupKey != "" {
			if seen[sp.dedupKey] || s.dedup.get(sp.dedupKey, now) != nil {
				continue
			}
			if seen == nil {
				seen = make(map[string]bool)
			}
			seen[sp.dedupKey] = true
		}
		targets := 1
		if !sp.isURL {
			targets = 0
			if g := s.groups[sp.dest]; g != nil {
				targets = len(g.endpoints)
			}
		}
		n += targets
		bytes += int64(targets) * sp.size
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
