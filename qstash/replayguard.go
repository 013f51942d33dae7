package qstash

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/outboxkit/outboxkit/core"
)

// A valid signature proves that QStash sent a request, not that QStash sent
// it now: whoever captures a delivery (a proxy's log, a shared trace) can
// send the same token and body again until the token expires, five minutes
// after QStash signed it. Upstash documents that a JWT is sent "with each
// request" (qstash/howto/signature) and that jti is "A unique id for this
// token" (qstash/features/security); retries come up to a day apart
// (qstash/features/retry) while a token lives 5 minutes, so a retry can
// only verify with a token minted for it, and every SDK's Receiver checks
// exp. Each attempt therefore carries a token, and a jti, of its own
// (qstashdev signs each attempt the same way): a token seen twice is a
// replay, and the Receiver refuses it.

// ReplayGuard remembers the tokens a Receiver accepted, so that each is
// accepted once. Implementations must be safe for concurrent use. The
// Receiver's default, NewMemoryReplayGuard, protects one process; consumers
// running several instances behind one URL share one guard (a database
// table, such as postgres.TokenGuard), or a replay sent to another instance
// gets through. Its method uses standard types only, so a store adapter
// implements it without importing this package.
type ReplayGuard interface {
	// FirstUse records tokenID (the token's jti claim) until expires and
	// reports whether this is its first use: false when tokenID was
	// recorded before and has not expired. A recorded ID may be forgotten
	// once expires has passed, since the Verifier refuses the token by
	// then. An error makes the Receiver answer 503 (500 without a
	// core.RetryAfter hint) with nothing applied, so QStash retries.
	FirstUse(ctx context.Context, tokenID string, expires time.Time) (bool, error)
}

// ErrReplayGuardFull is matched by the error a MemoryReplayGuard returns when
// it holds MaxTokens unexpired tokens: it refuses new ones rather than
// forget live ones, and the Receiver answers 503 until the oldest expire.
var ErrReplayGuardFull = errors.New("qstash: replay guard is full")

// DefaultMaxTokens bounds a MemoryReplayGuard by default. A token takes about
// 100 bytes and is kept for QStash's 5-minute lifetime (plus the leeway), so
// the default holds up to ~100 MiB and sustains about 3,400 deliveries a
// second per instance.
const DefaultMaxTokens = 1 << 20

// MemoryReplayGuardConfig configures a MemoryReplayGuard.
type MemoryReplayGuardConfig struct {
	// MaxTokens bounds the unexpired tokens held. Defaults to
	// DefaultMaxTokens.
	MaxTokens int
	// Clock tells when tokens expire. Defaults to core.SystemClock.
	Clock core.Clock
}

// MemoryReplayGuard is a ReplayGuard in memory, for one process. Its memory
// is bounded: a token is forgotten once it expires, and at most MaxTokens are
// held at once.
type MemoryReplayGuard struct {
	mu    sync.Mutex
	max   int
	clock core.Clock
	seen  map[string]int64 // token ID → expiry, unix nanoseconds
	order expiryHeap
}

var _ ReplayGuard = (*MemoryReplayGuard)(nil)

// NewMemoryReplayGuard returns an empty guard. cfg may be nil.
func NewMemoryReplayGuard(cfg *MemoryReplayGuardConfig) *MemoryReplayGuard {
	g := &MemoryReplayGuard{max: DefaultMaxTokens, clock: core.SystemClock{}, seen: make(map[string]int64)}
	if cfg != nil {
		if cfg.MaxTokens > 0 {
			g.max = cfg.MaxTokens
		}
		if cfg.Clock != nil {
			g.clock = cfg.Clock
		}
	}
	return g
}

// FirstUse implements ReplayGuard.
func (g *MemoryReplayGuard) FirstUse(_ context.Context, tokenID string, expires time.Time) (bool, error) {
	now := g.clock.Now().UnixNano()
	g.mu.Lock()
	defer g.mu.Unlock()
	for len(g.order) > 0 && g.order[0].expires <= now {
		e := heap.Pop(&g.order).(expiry)
		if g.seen[e.id] == e.expires {
			delete(g.seen, e.id)
		}
	}
	if _, ok := g.seen[tokenID]; ok {
		return false, nil // unexpired: the expired ones are gone
	}
	if len(g.seen) >= g.max {
		wait := time.Duration(g.order[0].expires - now)
		return false, core.RetryAfter(fmt.Errorf("%w: %d unexpired tokens (MaxTokens); the oldest expires in %s", ErrReplayGuardFull, len(g.seen), wait.Round(time.Second)), wait)
	}
	exp := expires.UnixNano()
	g.seen[tokenID] = exp
	heap.Push(&g.order, expiry{id: tokenID, expires: exp})
	return true, nil
}

// Len returns the number of tokens held, expired ones not yet forgotten
// included.
func (g *MemoryReplayGuard) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.seen)
}

// expiry is a token ID and when it may be forgotten.
type expiry struct {
	id      string
	expires int64
}

// expiryHeap orders tokens by expiry, soonest first, so expired ones are
// dropped without scanning the rest.
type expiryHeap []expiry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expires < h[j].expires }
func (h expiryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)        { *h = append(*h, x.(expiry)) }
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
