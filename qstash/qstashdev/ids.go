package qstashdev

import (
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"
)

// idSource makes message ids, JWT ids and signing keys. Message ids are a
// random per-server prefix plus a counter: unique within a server, cheap on
// the publish hot path, and ordered by creation, which keeps them readable in
// logs. They look like QStash's ("msg_" and base-62 text), but clients must
// treat them as opaque anyway.
type idSource struct {
	prefix string
	n      atomic.Uint64
}

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

func newIDSource() *idSource {
	return &idSource{prefix: randomBase62(8)}
}

func (s *idSource) messageID() string { return s.next("msg_") }

func (s *idSource) scheduleID() string { return s.next("scd_") }

func (s *idSource) next(kind string) string {
	n := s.n.Add(1)
	buf := make([]byte, 0, 32)
	buf = append(buf, kind...)
	buf = append(buf, s.prefix...)
	// Fixed width keeps lexical order equal to creation order.
	var digits [11]byte
	for i := len(digits) - 1; i >= 0; i-- {
		digits[i] = base62[n%62]
		n /= 62
	}
	buf = append(buf, digits[:]...)
	return string(buf)
}

// randomBase62 returns n random base-62 characters. math/rand/v2's global
// generator is ChaCha8 seeded from the OS, which is plenty for a local
// server's ids and keys.
func randomBase62(n int) string {
	return string(appendRandomBase62(make([]byte, 0, n), n))
}

func appendRandomBase62(b []byte, n int) []byte {
	for range n {
		b = append(b, base62[rand.IntN(len(base62))])
	}
	return b
}

func newSigningKey() string { return "sig_" + randomBase62(28) }

// dlqID follows QStash's "<unix ms>-<sequence>" form.
func dlqID(t time.Time, seq uint64) string {
	return strconv.FormatInt(t.UnixMilli(), 10) + "-" + strconv.FormatUint(seq, 10)
}
