package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
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

	runMu   sync.Mutex
	running bool
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
// once. It returns nil after a graceful shutdown. Run may be called once at a
// time.
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

	// hardCtx outlives ctx by ShutdownTimeout: in-flight publishes and
	// settles run under it.
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
			if err := n.Listen(ctx, r.Wake); err != nil && ctx.Err() == nil {
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

// work is one worker's loop: claim and process batches while there are due
// events, then wait for a wake-up or the poll interval.
func (r *Relay) work(ctx, hardCtx context.Context) {
	for ctx.Err() == nil {
		n, err := r.processBatch(ctx, hardCtx)
		if err != nil && ctx.Err() == nil {
			r.log.Error("outbox relay batch failed", "error", err)
		}
		if err == nil && n == r.cfg.BatchSize {
			// A full batch suggests more is due: keep going and bring in an
			// idle worker too.
			r.Wake()
			continue
		}
		t := r.cfg.Clock.NewTimer(r.cfg.PollInterval)
		select {
		case <-ctx.Done():
		case <-r.wake:
		case <-t.C():
		}
		t.Stop()
	}
}

// Drain processes batches until none is due and returns how many events it
// settled. It suits a relay run from a scheduler (a cron job, a serverless
// function) rather than as a long-lived process. Events that fail are
// scheduled for retry as usual and not retried within the same Drain.
func (r *Relay) Drain(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := r.processBatch(ctx, ctx)
		total += n
		if err != nil {
			return total, err
		}
		if n < r.cfg.BatchSize {
			return total, nil
		}
	}
}

// processBatch claims, publishes and settles one batch; it returns the number
// of events claimed.
func (r *Relay) processBatch(ctx, hardCtx context.Context) (int, error) {
	req := ClaimRequest{Limit: r.cfg.BatchSize, LeaseFor: r.cfg.LeaseDuration, Destination: r.cfg.Destination}
	if !isSystemClock(r.cfg.Clock) {
		req.Now = r.cfg.Clock.Now()
	}
	batch, err := r.store.Claim(ctx, req)
	if err != nil {
		return 0, fmt.Errorf("claim batch: %w", err)
	}
	if len(batch.Events) == 0 {
		return 0, nil
	}

	pubCtx, cancel := context.WithTimeout(hardCtx, r.cfg.PublishTimeout)
	start := r.cfg.Clock.Now()
	pubErr := r.publish(pubCtx, batch.Events)
	elapsed := r.cfg.Clock.Now().Sub(start)
	cancel()

	errs := EventErrors(len(batch.Events), pubErr)
	outcomes := make([]Outcome, len(batch.Events))
	for i, e := range batch.Events {
		if errs[i] != nil && (hardCtx.Err() != nil || IsNotAttempted(errs[i])) {
			// Shutdown cut this publish short, or the publisher never tried
			// the event: the attempt says nothing about it, so give it back
			// untouched.
			outcomes[i] = Outcome{ID: e.ID, Kind: Released}
			continue
		}
		outcomes[i] = r.cfg.Retry.Decide(e.ID, e.Attempts, errs[i])
		if outcomes[i].Kind != Published {
			r.log.Warn("outbox publish failed", "event_id", e.ID, "event_type", e.Type,
				"attempts", e.Attempts, "outcome", outcomes[i].Kind, "error", errs[i])
		}
	}

	// Settle even when ctx is done, so a shutting-down relay records what it
	// published; bound it by the lease, after which settling is moot.
	settleCtx, cancelSettle := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.LeaseDuration)
	defer cancelSettle()
	sreq := SettleRequest{Lease: batch.Lease, Outcomes: outcomes}
	if !isSystemClock(r.cfg.Clock) {
		sreq.Now = r.cfg.Clock.Now()
	}
	settleErr := r.store.Settle(settleCtx, sreq)
	for _, h := range r.cfg.Hooks {
		h.AfterSettle(settleCtx, SettleInfo{Events: batch.Events, Outcomes: outcomes, PublishDuration: elapsed, Err: settleErr})
	}
	if settleErr != nil {
		if errors.Is(settleErr, ErrLeaseLost) {
			// Another relay owns these events now; it will settle them.
			r.log.Warn("outbox lease lost before settling; events will be published again", "error", settleErr)
			return len(batch.Events), nil
		}
		return len(batch.Events), fmt.Errorf("settle batch: %w", settleErr)
	}
	return len(batch.Events), nil
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
