package core

import (
	"context"
	"time"
)

// Store is the relay's side of an outbox. Writing events is typed per store
// (each takes the caller's own transaction type), so it is not part of this
// contract.
//
// A Store must be safe for concurrent use by many relays, in one process or
// many: Claim never hands out an event whose lease is live, and Settle applies
// only to events whose lease token still matches.
type Store interface {
	// Claim leases up to req.Limit pending events that are due (AvailableAt
	// not in the future, no live lease), oldest first, under one fresh lease
	// token. It increments each event's Attempts. An empty batch is not an
	// error, and a batch shorter than req.Limit means nothing more was due.
	// A store may relax "oldest first" across the whole backlog so that
	// relays sharing it do not contend for the same rows (the PostgreSQL
	// store's slot claims do); each batch is still in order, and a store
	// that offers per-aggregate ordering keeps it strictly.
	//
	// Claim exists so that the network call to the transport happens with no
	// database lock held: the lease, not a row lock, keeps other relays off.
	Claim(ctx context.Context, req ClaimRequest) (Batch, error)

	// Settle records what happened to events of one lease: published,
	// scheduled for retry, dead-lettered, or released untouched. It applies
	// only to events whose lease token is still req.Lease.Token and returns a
	// *LeaseLostError (matching ErrLeaseLost) listing the others, after
	// settling the rest.
	//
	// One method covers every outcome so a store can settle a whole batch in
	// one round trip, and so a stale relay is fenced in exactly one place.
	Settle(ctx context.Context, req SettleRequest) error
}

// SettleClaimer is implemented by stores that can settle one batch and claim
// the next in a single round trip. A relay whose batch came back full uses it
// instead of Settle followed by Claim: at high throughput the round trip it
// saves is a large share of the work per batch.
type SettleClaimer interface {
	// SettleAndClaim does what Settle(ctx, s) and then Claim(ctx, c) would.
	// settleErr is what Settle would return (nil, or a *LeaseLostError after
	// settling the rest); claimErr is what Claim would return. When the
	// round trip fails as a whole, both are non-nil and neither took effect
	// (a lease that was not settled simply expires).
	SettleAndClaim(ctx context.Context, s SettleRequest, c ClaimRequest) (next Batch, settleErr, claimErr error)
}

// ClaimRequest is the argument of Store.Claim. It is a struct so fields can be
// added without breaking implementations.
type ClaimRequest struct {
	// Limit is the most events to claim. Must be positive.
	Limit int
	// LeaseFor is how long the lease lasts. Must be positive.
	LeaseFor time.Duration
	// Destination, when not empty, restricts the claim to events whose
	// Destination equals it, so a relay can be dedicated to one destination
	// (a slow webhook that must not hold up the others, or a Watermill topic
	// consumed straight from the outbox). Stores that cannot filter return an
	// error matching ErrUnsupported.
	Destination string
	// Now, when not zero, is the time the store must use for due-ness and
	// lease expiry instead of its own clock. Relays set it only when they run
	// on a non-system Clock (tests); in production the store's clock (the
	// database's now()) stays authoritative, so relays on hosts with skewed
	// clocks cannot steal each other's leases.
	Now time.Time
}

// Batch is the result of a Claim.
type Batch struct {
	// Lease identifies this claim; pass it back to Settle.
	Lease Lease
	// Events are the claimed events, oldest first. Attempts includes this
	// claim.
	Events []Event
	// PayloadsAreJSON says the store guarantees every payload is valid JSON
	// (PostgreSQL's jsonb column cannot hold anything else), so the relay
	// need not parse them again when it validates the claimed events.
	// Validating JSON is most of a relay's own CPU time per event at full
	// speed. Leave it false unless the storage itself enforces it.
	PayloadsAreJSON bool
}

// Lease is a claim on a set of events until a point in time.
type Lease struct {
	// Token is unique per claim; settling requires it.
	Token ID
	// Until is when the lease expires and the events become claimable again,
	// in the store's clock.
	Until time.Time
	// Handle is the store's own note about the claimed rows, carried from
	// Claim to Settle so the settlement can find them cheaply (the
	// PostgreSQL store keeps their row addresses here, sparing an index
	// probe per event). Relays pass the Lease back unchanged and never look
	// inside. It is an optimisation only: a store must settle correctly
	// with a nil or foreign Handle, and the token alone decides who may
	// settle.
	Handle any
}

// OutcomeKind says what happened to a claimed event.
type OutcomeKind int

// The outcomes a relay reports for each claimed event.
const (
	// Published: the transport accepted the event. It is never claimed again
	// (unless replayed).
	Published OutcomeKind = iota + 1
	// Retry: the publish failed; the event becomes claimable again
	// Outcome.Delay from now, keeping its Attempts count, with Outcome.Error
	// recorded.
	Retry
	// DeadLettered: the event failed for good (a permanent error or too many
	// attempts). It keeps its row and error and is not claimed again until
	// replayed.
	DeadLettered
	// Released: the relay gave the event back without trying it (shutting
	// down). It is claimable again at once and its Attempts count is restored.
	Released
	// Deferred: the publish failed because of configuration, not because of
	// the event (ErrMisconfigured). Like Retry the event becomes claimable
	// again Outcome.Delay from now with Outcome.Error recorded; like Released
	// its Attempts count is restored, so a misconfiguration, however long
	// it lasts, never dead-letters it.
	Deferred
)

func (k OutcomeKind) String() string {
	switch k {
	case Published:
		return "published"
	case Retry:
		return "retry"
	case DeadLettered:
		return "dead-lettered"
	case Released:
		return "released"
	case Deferred:
		return "deferred"
	default:
		return "unknown"
	}
}

// Outcome is the result for one claimed event.
type Outcome struct {
	ID   ID
	Kind OutcomeKind
	// Error is the publish error's text (Retry, DeadLettered, Deferred).
	Error string
	// Delay is how long after the store's now (SettleRequest.Now when set) the
	// event becomes due again (Retry, Deferred). It is a duration, not a time, so the
	// store's clock stays the only one that matters.
	Delay time.Duration
}

// SettleRequest is the argument of Store.Settle.
type SettleRequest struct {
	Lease    Lease
	Outcomes []Outcome
	// Now, when not zero, is the time to record (published or dead-lettered
	// at); see ClaimRequest.Now.
	Now time.Time
}

// Notifier is implemented by stores that can wake relays when events are
// written (PostgreSQL LISTEN/NOTIFY, say). Wake-ups are hints: a relay still
// polls, so a missed notification delays an event by at most one poll interval.
type Notifier interface {
	// Listen calls wake, which never blocks, whenever new events may be due:
	// once as soon as it is listening (and again after every reconnect, since
	// notifications sent meanwhile are lost), then on each notification. It
	// blocks until ctx is done and then returns ctx.Err(); it handles
	// reconnects itself.
	Listen(ctx context.Context, wake func()) error
}

// Checker is implemented by stores that can tell whether they can work at
// all: the database is reachable, the schema is present, its migrations are
// at the version the code expects. Relay.Run calls Check before anything
// else and refuses to start when it fails, so that a missing table stops a
// deploy instead of leaving a relay that runs and relays nothing.
type Checker interface {
	// Check returns nil when the store is ready, or an error saying what is
	// missing and what to do.
	Check(ctx context.Context) error
}

// Stats is a snapshot of an outbox for operators.
type Stats struct {
	// Pending counts events neither published nor dead-lettered.
	Pending int64
	// OldestPendingAt is the creation time of the oldest pending event, or the
	// zero time when none is pending.
	OldestPendingAt time.Time
	// OldestPendingAge is how long the oldest pending event has waited.
	OldestPendingAge time.Duration
	// Leased counts pending events under a live lease (in flight).
	Leased int64
	// DeadLettered counts dead-lettered events.
	DeadLettered int64
	// Attempts maps an attempt count to the number of pending events that have
	// been tried that many times.
	Attempts map[int]int64
}

// StatsReader is implemented by stores that can report Stats.
type StatsReader interface {
	Stats(ctx context.Context) (Stats, error)
}

// ReplayFilter selects events to replay. Fields combine with AND; an empty
// filter matches nothing (replaying everything must be asked for with All).
type ReplayFilter struct {
	IDs           []ID
	Types         []string
	AggregateType string
	AggregateID   string
	// Since and Until bound CreatedAt (inclusive, exclusive); zero means open.
	Since, Until time.Time
	// DeadOnly restricts the replay to dead-lettered events.
	DeadOnly bool
	// All must be set to replay every event matching no other criterion.
	All bool
}

// Empty reports whether the filter has no criterion and All is unset.
func (f ReplayFilter) Empty() bool {
	return !f.All && len(f.IDs) == 0 && len(f.Types) == 0 && f.AggregateType == "" &&
		f.AggregateID == "" && f.Since.IsZero() && f.Until.IsZero() && !f.DeadOnly
}

// Replayer is implemented by stores that can put published or dead-lettered
// events back to pending, keeping their IDs (so consumers' deduplication still
// recognises those already applied) and resetting Attempts.
type Replayer interface {
	Replay(ctx context.Context, f ReplayFilter) (int64, error)
}

// PruneRequest is the argument of Pruner.Prune.
type PruneRequest struct {
	// PublishedBefore deletes published events published before this time.
	PublishedBefore time.Time
	// BatchSize bounds each delete statement so pruning never holds long
	// locks. Stores choose a default when zero.
	BatchSize int
	// Progress, if set, is called after each batch with the running total.
	Progress func(deleted int64)
}

// Pruner is implemented by stores that delete old published events.
// Dead-lettered events are never pruned: they stay until replayed or purged.
type Pruner interface {
	Prune(ctx context.Context, req PruneRequest) (int64, error)
}
