package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Relay moves committed events from a Store to a Publisher: claim a batch
// under a lease, release the database, publish, settle each event's outcome.
// Many relays, in one process or many, may share a store; leases keep them
// apart and lease tokens fence a relay whose lease expired.
//
// Delivery is at-least-once: a relay that crashes after publishing and before
// settling leaves its events to be published again when the lease expires.
// Consumers make effects exactly-once with a Deduper.
type Relay struct {
	store Store
	pub   Publisher
	cfg   RelayConfig
	log   *slog.Logger

	// wake holds at most one pending wake-up: a notification, or a worker
	// that found a full batch asking another worker to join in.
	wake chan struct{}

	// notifications counts the store's wake-ups (not the relay's own), so
	// a worker can tell whether the events it found had been announced.
	notifications atomic.Uint64
	// lastFind is when (Clock time, in Unix nanoseconds; 0 for never) a
	// claim last found events no wake-up had announced: the poll waits
	// grow with the time since (pollWait).
	lastFind atomic.Int64
	// pacer spaces the claims while events flow (paceWake).
	pacer flowPacer

	runMu   sync.Mutex
	running bool

	// A run of failed claims, shared by the workers, so that the line
	// saying the store is reachable again is written once and can say how
	// long it was not.
	claimMu           sync.Mutex
	claimFailures     int
	claimFailingSince time.Time

	// misconfigured counts consecutive batches that failed because of
	// configuration (ErrMisconfigured). It, not the events' attempts, sets
	// how long their deferral lasts: the backoff grows while the
	// misconfiguration lasts and starts over once a batch gets through.
	misconfigMu  sync.Mutex
	misconfigged int
}

// NewRelay returns a relay over store and pub. cfg may be nil for the
// defaults; it is validated here so that a misconfiguration fails at start-up,
// not at the first failed publish.
func NewRelay(store Store, pub Publisher, cfg *RelayConfig) (*Relay, error) {
	if store == nil {
		return nil, &ConfigError{Field: "store", Reason: "is nil"}
	}
	if pub == nil {
		return nil, &ConfigError{Field: "publisher", Reason: "is nil"}
	}
	var c RelayConfig
	if cfg != nil {
		c = *cfg
	}
	c = c.WithDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Relay{
		store: store,
		pub:   ChainPublisher(pub, c.Middleware...),
		cfg:   c,
		log:   c.Logger,
		wake:  make(chan struct{}, 1),
	}, nil
}

// Config returns the relay's configuration with defaults applied.
func (r *Relay) Config() RelayConfig { return r.cfg }

// Wake asks an idle worker to look for due events now. It never blocks. Stores
// with a Notifier call it for you; call it yourself after writing events
// through a store that has none, to skip the poll wait.
func (r *Relay) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run relays events until ctx is done, then shuts down gracefully: it stops
// claiming, lets in-flight publishes finish for up to ShutdownTimeout, then
// cancels them and releases their events so another relay can take them at
// once. A batch whose claim was still running when ctx ended is released as
// soon as the claim returns, without being published. Store calls are never
// cut short by the shutdown (a claim cancelled after the database committed
// it would leave its batch leased, with no one to release it); each is
// bounded by LeaseDuration instead. It returns nil after a graceful shutdown.
// Run may be called once at a time.
//
// When the store implements Checker, Run calls Check first and returns its
// error, saying the relay did not start, instead of running over a store
// that cannot work (a missing schema, say). Failures after the start are
// logged and retried, not returned.
func (r *Relay) Run(ctx context.Context) error {
	r.runMu.Lock()
	if r.running {
		r.runMu.Unlock()
		return errors.New("outboxkit: relay is already running")
	}
	r.running = true
	r.runMu.Unlock()
	defer func() {
		r.runMu.Lock()
		r.running = false
		r.runMu.Unlock()
	}()

	if c, ok := r.store.(Checker); ok {
		if err := c.Check(ctx); err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return nil // shut down before starting: nothing failed
			}
			return fmt.Errorf("outboxkit: relay did not start: store check failed: %w", err)
		}
	}

	// hardCtx outlives ctx by ShutdownTimeout: in-flight publishes run
	// under it (store calls run under storeContext).
	hardCtx, hardCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hardCancel()
	stopHard := context.AfterFunc(ctx, func() {
		if r.cfg.ShutdownTimeout < 0 {
			hardCancel()
			return
		}
		t := r.cfg.Clock.NewTimer(r.cfg.ShutdownTimeout)
		go func() {
			defer t.Stop()
			select {
			case <-t.C():
				hardCancel()
			case <-hardCtx.Done():
			}
		}()
	})
	defer stopHard()

	var wg sync.WaitGroup
	if n, ok := r.store.(Notifier); ok && !r.cfg.DisableNotifier {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.Listen(ctx, r.notified); err != nil && ctx.Err() == nil {
				r.log.Warn("outbox notifier stopped; relying on polling", "error", err)
			}
		}()
	}
	for i := 0; i < r.cfg.Concurrency; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.work(ctx, hardCtx)
		}()
	}
	// Look at once: events may have piled up while no relay ran.
	r.Wake()
	wg.Wait()
	return nil
}

// notified is the wake function handed to the store's Notifier: a Wake
// that is counted, so that workers know the store announces events.
func (r *Relay) notified() {
	r.notifications.Add(1)
	r.Wake()
}

// work is one worker's loop: process batches while there are due events,
// then wait for a wake-up or the poll (pollWait says how long).
func (r *Relay) work(ctx, hardCtx context.Context) {
	woken := true // Run wakes the workers as it starts them
	seen := r.notifications.Load()
	rechecks := 0
	for ctx.Err() == nil {
		began := r.notifications.Load()
		// Woken or polling, while events flow the claims are spaced.
		claim := r.paceWake(ctx)
		if ctx.Err() != nil {
			return
		}
		if !claim {
			// Another worker claims once the spacing is over.
			woken, rechecks = r.idle(ctx, r.cfg.PollInterval)
			continue
		}
		roundAt := r.cfg.Clock.Now()
		found, err := r.runBatches(ctx, hardCtx, true, nil)
		if found > 0 {
			// runBatches returns after a batch that was not full: events
			// flow, but there is no backlog.
			r.pacer.found(roundAt, found, r.cfg.Clock.Now().Sub(roundAt))
		}
		if err != nil && ctx.Err() == nil {
			r.log.Error("outbox relay batch failed", "error", err)
		}
		// Announced: the store sent a wake-up between this worker's
		// previous look and the end of this one, which may have been
		// about the events it found.
		announced := r.notifications.Load() != seen
		seen = began
		var wait time.Duration
		wait, rechecks = r.pollWait(woken, found, announced, rechecks)
		if wait == 0 {
			woken = false
			continue
		}
		woken, _ = r.idle(ctx, wait)
	}
}

// idle waits for a wake-up, the timer or ctx, and says whether a wake-up
// ended the wait (and that no second look is pending).
func (r *Relay) idle(ctx context.Context, wait time.Duration) (bool, int) {
	t := r.cfg.Clock.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, 0
	case <-r.wake:
		return true, 0
	case <-t.C():
		return false, 0
	}
}

// paceWake spaces a relay's claims while events flow: a worker about to
// claim (woken, or its poll timer fired) then waits until the claim
// interval (flowPacer.interval) has passed since the last claim round that
// found events, and only one worker waits so: paceWake returns false to
// the others, whose wake-up the waiting worker's claim covers. It returns true at once when events are not flowing (the
// first event after a quiet spell is claimed at once), and false if ctx
// ended.
//
// Why: every commit can wake the relay (a WAL stream announces each one),
// and a claim and its settlement cost the database two statements and two
// commits whatever the batch holds. Claiming at every wake-up, the relay
// under 8 busy writers claimed one to three events at a time and spent
// ~110 µs of PostgreSQL CPU per event (writers spent ~200 µs on theirs);
// claims spaced 5 ms apart took ~45 µs per event. Spacing them by the
// rate lets batches grow with it while the delay it adds stays small
// where it matters: none for a lone event, about 1 ms at 1,000 events/s,
// 5 ms at 5,000/s, never more than maxPace.
// A full batch (a backlog) goes on at once, without pacing.
func (r *Relay) paceWake(ctx context.Context) bool {
	due, wait := r.pacer.reserve(r.cfg.Clock.Now())
	if !due {
		return false
	}
	if wait <= 0 {
		return true
	}
	t := r.cfg.Clock.NewTimer(wait)
	defer t.Stop()
	defer r.pacer.release()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// flowPacer follows the rate at which a relay's claims find events while
// they flow, and the one worker waiting to claim (paceWake).
type flowPacer struct {
	mu sync.Mutex
	// at is when the last claim round that found events (without a full
	// batch) began; zero for never.
	at time.Time
	// rate is the smoothed rate of events found, per second; took the
	// smoothed duration of those rounds (claim, publish, settle).
	rate float64
	took time.Duration
	// waiting is set while a worker waits to claim.
	waiting bool
}

// flowWindow is how long after a claim round found events they count as
// flowing; past it the rate starts over.
const flowWindow = time.Second

// found records that a claim round begun at at found n events and took
// took.
func (p *flowPacer) found(at time.Time, n int, took time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if d := at.Sub(p.at); !p.at.IsZero() && d > 0 && d < flowWindow {
		// The events found had been committed since the previous round
		// began.
		inst := float64(n) / d.Seconds()
		p.rate = 0.75*p.rate + 0.25*inst
		p.took = (3*p.took + took) / 4
	} else {
		p.rate, p.took = 0, took
	}
	p.at = at
}

// maxPace bounds the spacing of claims while events flow, and so the
// delay it adds: 10 ms, the p99 the latency target allows at 5,000
// events/s.
const maxPace = 10 * time.Millisecond

// busyShare is how many times a claim round's duration the relay waits
// before the next while events flow: its rounds then take at most a
// third of its time.
const busyShare = 2

// interval is the spacing of claims: none below paceFrom, then a
// microsecond per event per second (2 ms at 2,000/s, 5 ms at 5,000/s), or
// busyShare times what the rounds take if longer, at most maxPace.
// Batches then grow with the square of the rate (about 4 events at
// 2,000/s, 25 at 5,000/s) and the delay only linearly; and when the
// database is busy, its claims slow down, and the relay backs off with
// them instead of competing with the writers. Measured on 2 cores with 8
// producers: without the paceFrom threshold the spacing cost p50 / p99
// 2.16 / 8.34 ms at 1,000 events/s against 1.09 / 4.82 ms with it, while
// 8 writers with the relay consuming their ~3,600 events/s kept the same
// throughput (0.75 and 0.77 × the hand-written INSERT).
func (p *flowPacer) interval() time.Duration {
	if p.rate < paceFrom {
		return 0
	}
	return min(maxPace, max(busyShare*p.took, time.Duration(p.rate*float64(time.Microsecond))))
}

// paceFrom is the rate (events a second) from which claims are spaced.
// Below it each wake-up is claimed at once: batches would stay at one or
// two events whatever the spacing, so it would only add latency (about a
// millisecond at 1,000 events/s on 2 cores).
const paceFrom = 1500

// reserve says whether the caller should claim (false: another worker is
// waiting to) and how long it must wait first. A caller told to wait must
// release once it has.
func (p *flowPacer) reserve(now time.Time) (bool, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.at.IsZero() {
		return true, 0
	}
	wait := p.at.Add(p.interval()).Sub(now)
	if wait <= 0 {
		return true, 0
	}
	if p.waiting {
		return false, 0
	}
	p.waiting = true
	return true, wait
}

func (p *flowPacer) release() {
	p.mu.Lock()
	p.waiting = false
	p.mu.Unlock()
}

// pollBackoff divides the idle time into the poll wait: once polls stop
// finding events, the relay waits an eighth of the time since they last
// did. An event written after the relay has been idle for t therefore
// waits at most about t/8 (plus a round trip), while an idle relay reaches
// PollInterval after 8 × PollInterval and spends about 8·ln(PollInterval /
// MinPollInterval) polls getting there (~55 from 1 ms to 1 s).
const pollBackoff = 8

// pollWait is how long a worker waits for a wake-up before it polls again,
// given how it was last woken (a wake-up rather than its timer), how many
// events it has just processed, whether the store announced any meanwhile,
// and how many second looks (below) it has taken since; it returns the
// wait and the new count of second looks.
//
// Why adaptive, and why in the relay: writers that notify cost themselves
// throughput (PostgreSQL serialises the commits of notifying
// transactions), so by default the PostgreSQL store's writers send
// nothing, and a relay without a wake-up stream learns of new events only
// by looking. Polling every millisecond all the time would cost an idle
// relay a thousand claims a second; polling every second would make every
// event wait up to a second. So while polls find events nobody announced,
// the relay looks again after MinPollInterval; once they stop, the wait
// grows with the idle time (pollBackoff) up to PollInterval. Events a
// wake-up announced do not speed polling up: the wake-ups already bring
// the relay at once, and polling fast beside them would only double the
// claims. They get one more look only, after MinPollInterval (the pacing
// may stretch it), in case the announcements stop while events still flow.
//
// And a wake-up that found nothing may have overtaken the
// commit it announced. A replication stream reports a commit once its
// record is flushed, a moment before the committing session makes it
// visible to others; on a busy 2-core server a few percent of the
// PostgreSQL store's WAL wake-ups arrived that early. So the worker looks
// again at once (one round trip is usually enough), and once more after
// MinPollInterval, before it goes back to waiting.
func (r *Relay) pollWait(woken bool, found int, announced bool, rechecks int) (time.Duration, int) {
	now := r.cfg.Clock.Now()
	switch {
	case found > 0 && !announced:
		r.lastFind.Store(now.UnixNano())
	case found > 0:
		// Announced events: look once more soon all the same. The
		// announcements may stop while events still flow (a WAL stream
		// pauses when busy), and a wake-up may have come a moment before
		// its commit was visible; the look after this one, if it finds
		// nothing, goes back to the idle wait.
		return r.cfg.MinPollInterval, 0
	case found == 0 && rechecks == 0 && woken && announced:
		return 0, 1
	case found == 0 && rechecks == 1:
		return r.cfg.MinPollInterval, 2
	}
	last := r.lastFind.Load()
	if last == 0 {
		return r.cfg.PollInterval, 0
	}
	// Each worker waits Concurrency times the relay's interval, so that
	// the relay as a whole looks about once per interval, not once per
	// worker.
	wait := time.Duration(r.cfg.Concurrency) * max(now.Sub(time.Unix(0, last))/pollBackoff, r.cfg.MinPollInterval)
	return min(wait, r.cfg.PollInterval), 0
}

// Drain processes batches until none is due and returns how many events it
// settled. It suits a relay run from a scheduler (a cron job, a serverless
// function) rather than as a long-lived process. Events that fail are
// scheduled for retry as usual and not retried within the same Drain.
//
// When ctx ends, Drain stops as Run does but with no grace period: it claims
// nothing more, cancels the publish in flight and releases its events,
// releases the batch of a claim that was in flight, and returns ctx's error.
func (r *Relay) Drain(ctx context.Context) (int, error) {
	return r.runBatches(ctx, ctx, false, nil)
}

// claimRequest is the relay's claim, with its clock's time when that clock is
// not the system's.
func (r *Relay) claimRequest() ClaimRequest {
	return ClaimRequest{Limit: r.cfg.BatchSize, LeaseFor: r.cfg.LeaseDuration, Destination: r.cfg.Destination, Now: r.now()}
}

// now is the time to pass to the store: zero (the store's own clock) unless
// the relay runs on a non-system clock.
func (r *Relay) now() time.Time {
	if isSystemClock(r.cfg.Clock) {
		return time.Time{}
	}
	return r.cfg.Clock.Now()
}

// runBatches claims and processes batches for as long as claims come back
// full, and returns the number of events processed. After a full batch the
// next claim is due at once; a store that implements SettleClaimer gets the
// settle of one batch and the claim of the next in one round trip. With
// wakeOthers, a full batch also wakes an idle worker to join in. observe,
// when set, sees every settled batch after the hooks (DrainWithin counts
// outcomes with it).
//
// Once ctx is done it claims nothing more, and a batch whose claim was in
// flight when ctx ended is released, not published: the claim ran under
// storeContext, so it came back with its batch instead of being cut short
// after the store had committed it.
func (r *Relay) runBatches(ctx, hardCtx context.Context, wakeOthers bool, observe func(SettleInfo)) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	sc, pipelined := r.store.(SettleClaimer)
	total := 0
	var firstErr error
	fail := func(err error) {
		if firstErr == nil {
			firstErr = err
		}
	}
	batch, claimErr := r.claim(ctx)
	for {
		if claimErr != nil {
			// A store should return no events with an error; if one does,
			// its events must not wait out a lease no one will settle.
			r.release(ctx, batch)
			fail(fmt.Errorf("claim batch: %w", claimErr))
			break
		}
		if len(batch.Events) == 0 {
			break
		}
		if ctx.Err() != nil {
			// Shutdown began while the claim ran: hand the batch straight
			// back, so its events are claimable at once.
			r.release(ctx, batch)
			fail(ctx.Err())
			break
		}
		total += len(batch.Events)
		full := len(batch.Events) == r.cfg.BatchSize
		if full && wakeOthers {
			r.Wake()
		}
		sreq, info := r.publishBatch(hardCtx, batch)

		// Settle even when ctx is done, so a shutting-down relay records
		// what it published.
		storeCtx, cancel := r.storeContext(ctx)
		var next Batch
		claimErr = nil
		more := full && ctx.Err() == nil
		if full && !more {
			fail(ctx.Err()) // stopped with events perhaps still due
		}
		switch {
		case more && pipelined:
			next, info.Err, claimErr = sc.SettleAndClaim(storeCtx, sreq, r.claimRequest())
			r.noteClaim(claimErr)
		case more:
			if info.Err = r.store.Settle(storeCtx, sreq); info.Err == nil || errors.Is(info.Err, ErrLeaseLost) {
				next, claimErr = r.store.Claim(storeCtx, r.claimRequest())
				r.noteClaim(claimErr)
			}
		default:
			info.Err = r.store.Settle(storeCtx, sreq)
		}
		for _, h := range r.cfg.Hooks {
			h.AfterSettle(storeCtx, info)
		}
		if observe != nil {
			observe(info)
		}
		cancel()

		switch {
		case info.Err == nil:
		case errors.Is(info.Err, ErrLeaseLost):
			// Another relay owns these events now; it will settle them.
			r.log.Warn("outbox lease lost before settling; events will be published again", "error", info.Err)
		default:
			// The events stay leased until the lease expires, then are
			// published again: at-least-once, never lost.
			fail(fmt.Errorf("settle batch: %w", info.Err))
		}
		batch = next
	}
	return total, firstErr
}

// storeContext returns the context of a store call (claim, settle, release).
// It is detached from ctx's cancellation: a claim cut short by a shutdown
// may have committed in the database all the same, and then its batch would
// stay leased, with no one left to release it, for a whole lease. It is
// bounded by the lease instead, after which whatever the call leased is
// claimable again and settling it is moot.
func (r *Relay) storeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), r.cfg.LeaseDuration)
}

// claim claims a batch under storeContext.
func (r *Relay) claim(ctx context.Context) (Batch, error) {
	claimCtx, cancel := r.storeContext(ctx)
	defer cancel()
	b, err := r.store.Claim(claimCtx, r.claimRequest())
	r.noteClaim(err)
	return b, err
}

// noteClaim follows runs of failed claims. Each failure is logged where it
// happens; the first success after a run says, at warn level so that the
// default filter shows it, that the store is reachable again, closing the
// run in the logs.
func (r *Relay) noteClaim(err error) {
	r.claimMu.Lock()
	defer r.claimMu.Unlock()
	if err != nil {
		if r.claimFailures == 0 {
			r.claimFailingSince = r.cfg.Clock.Now()
		}
		r.claimFailures++
		return
	}
	if r.claimFailures > 0 {
		r.log.Warn("outbox claims succeed again", "failures", r.claimFailures,
			"failing_for", r.cfg.Clock.Now().Sub(r.claimFailingSince).String())
		r.claimFailures = 0
	}
}

// publishBatch publishes a claimed batch and decides each event's outcome.
func (r *Relay) publishBatch(hardCtx context.Context, batch Batch) (SettleRequest, SettleInfo) {
	// Rows written by other services (plain SQL) have not been through Go's
	// validation. An invalid one can never be delivered usefully, so it is
	// dead-lettered here, in the outbox where operators look, instead of
	// being refused by every consumer after all of a transport's retries.
	errs := make([]error, len(batch.Events))
	send := batch.Events
	var sent []int // when some events are held back: indexes of those sent
	invalid := 0
	for i := range batch.Events {
		if err := batch.Events[i].validate(!batch.PayloadsAreJSON); err != nil {
			errs[i] = Permanent(err)
			invalid++
		}
	}
	if invalid > 0 {
		send = make([]Event, 0, len(batch.Events)-invalid)
		for i, e := range batch.Events {
			if errs[i] == nil {
				sent = append(sent, i)
				send = append(send, e)
			}
		}
	}

	var elapsed time.Duration
	if len(send) > 0 {
		pubCtx, cancel := context.WithTimeout(hardCtx, r.cfg.PublishTimeout)
		start := r.cfg.Clock.Now()
		pubErr := r.publish(pubCtx, send)
		elapsed = r.cfg.Clock.Now().Sub(start)
		cancel()
		sendErrs := EventErrors(len(send), pubErr)
		if errors.Is(sendErrs[0], ErrMisalignedBatch) {
			r.log.Error("outbox publisher returned a BatchError not aligned with its batch; retrying the whole batch. This is a bug in the publisher",
				"events", len(send), "error", sendErrs[0])
		}
		if sent == nil {
			errs = sendErrs
		} else {
			for k, i := range sent {
				errs[i] = sendErrs[k]
			}
		}
	}
	outcomes := make([]Outcome, len(batch.Events))
	var counts [Deferred + 1]int
	first := -1 // the first event that failed
	deferFor := r.misconfigDelay(errs)
	for i, e := range batch.Events {
		switch {
		case errs[i] != nil && !IsPermanent(errs[i]) && (hardCtx.Err() != nil || IsNotAttempted(errs[i])):
			// Shutdown cut this publish short, or the publisher never tried
			// the event: the attempt says nothing about it, so give it back
			// untouched.
			outcomes[i] = Outcome{ID: e.ID, Kind: Released}
		case IsMisconfigured(errs[i]):
			// The configuration failed, not the event: it keeps its
			// attempts, however long the misconfiguration lasts.
			outcomes[i] = Outcome{ID: e.ID, Kind: Deferred, Error: errs[i].Error(), Delay: deferFor}
		default:
			outcomes[i] = r.cfg.Retry.Decide(e.ID, e.Attempts, errs[i])
		}
		counts[outcomes[i].Kind]++
		if first < 0 && (outcomes[i].Kind == Retry || outcomes[i].Kind == DeadLettered || outcomes[i].Kind == Deferred) {
			first = i
		}
	}
	if first >= 0 {
		// One line per batch, not per event: an outage failing every event
		// would otherwise log a line for each of them.
		level, msg := slog.LevelWarn, "outbox publish failed"
		if counts[DeadLettered] > 0 {
			level = slog.LevelError
		}
		if counts[Deferred] > 0 {
			// Nothing is lost, but nothing moves until someone fixes it.
			level, msg = slog.LevelError, "outbox publish refused because of configuration; the events stay pending until it is fixed"
		}
		e := batch.Events[first]
		r.log.Log(hardCtx, level, msg, "events", len(batch.Events),
			"published", counts[Published], "retry", counts[Retry], "dead_lettered", counts[DeadLettered], "released", counts[Released],
			"deferred", counts[Deferred],
			"first_error", errs[first], "first_event_id", e.ID, "first_event_type", e.Type, "first_event_attempts", e.Attempts)
	}
	return SettleRequest{Lease: batch.Lease, Outcomes: outcomes, Now: r.now()},
		SettleInfo{Events: batch.Events, Outcomes: outcomes, PublishDuration: elapsed}
}

// misconfigDelay counts the batch in the run of misconfigured batches and
// returns how long its misconfigured events are deferred: the retry
// policy's backoff for the run's length. A batch with no such error ends
// the run.
func (r *Relay) misconfigDelay(errs []error) time.Duration {
	hit := false
	for _, err := range errs {
		hit = hit || IsMisconfigured(err)
	}
	r.misconfigMu.Lock()
	defer r.misconfigMu.Unlock()
	if !hit {
		r.misconfigged = 0
		return 0
	}
	r.misconfigged++
	return r.cfg.Retry.Backoff(r.misconfigged)
}

// release gives a claimed batch back untouched.
func (r *Relay) release(ctx context.Context, b Batch) {
	if len(b.Events) == 0 {
		return
	}
	outcomes := make([]Outcome, len(b.Events))
	for i, e := range b.Events {
		outcomes[i] = Outcome{ID: e.ID, Kind: Released}
	}
	settleCtx, cancel := r.storeContext(ctx)
	defer cancel()
	if err := r.store.Settle(settleCtx, SettleRequest{Lease: b.Lease, Outcomes: outcomes, Now: r.now()}); err != nil {
		r.log.Warn("outbox relay could not release a batch; it is claimable again when its lease expires", "error", err)
	}
}

// publish calls the publisher, turning a panic into an error so one bad
// publisher call cannot kill the relay with events leased.
func (r *Relay) publish(ctx context.Context, events []Event) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("outboxkit: publisher panicked: %v", v)
		}
	}()
	return r.pub.Publish(ctx, events)
}
