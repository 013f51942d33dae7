package core_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/outboxkit/outboxkit/core"
)

// TestEventErrorsMismatchedBatchError: a BatchError whose length is not the
// batch's cannot say which event each entry belongs to, so none of its
// entries may decide an event's fate. One permanent entry used to
// dead-letter the whole batch.
func TestEventErrorsMismatchedBatchError(t *testing.T) {
	rejected := core.Permanent(errors.New("400 bad request"))
	for name, err := range map[string]error{
		"shorter":          &core.BatchError{Errs: []error{nil, rejected}},
		"longer":           &core.BatchError{Errs: []error{nil, rejected, nil, nil}},
		"wrapped":          errors.Join(errors.New("publish"), &core.BatchError{Errs: []error{rejected}}),
		"typed nil":        (*core.BatchError)(nil),
		"retry-after hint": &core.BatchError{Errs: []error{core.RetryAfter(errors.New("429"), 1e12)}},
	} {
		errs := core.EventErrors(3, err)
		for i, e := range errs {
			if e == nil || core.IsPermanent(e) || core.IsNotAttempted(e) {
				t.Errorf("%s: event %d: %v (permanent %v), want one transient error for the whole batch", name, i, e, core.IsPermanent(e))
			}
			if _, hinted := core.RetryAfterHint(e); hinted {
				t.Errorf("%s: event %d carries an entry's RetryAfter hint", name, i)
			}
		}
		if errs[0] != nil && !strings.Contains(errs[0].Error(), "3") {
			t.Errorf("%s: error %q does not name the batch size", name, errs[0])
		}
	}
}

// TestRelayRetriesBatchOnMismatchedBatchError: the relay retries every
// event of a batch whose publisher answered with a misaligned BatchError,
// and says so at error level, since only a publisher bug produces one.
func TestRelayRetriesBatchOnMismatchedBatchError(t *testing.T) {
	var logs bytes.Buffer
	pub := core.PublisherFunc(func(_ context.Context, events []core.Event) error {
		be := core.NewBatchError(len(events) - 1) // off by one
		be.Set(0, core.Permanent(errors.New("rejected")))
		return be
	})
	f := newRelayFixture(t, nil, pub, core.RelayConfig{
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	events := f.add(3)
	if _, err := f.relay.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, e := range events {
		st, _ := f.store.Get(e.ID)
		if !st.DeadAt.IsZero() || !st.PublishedAt.IsZero() || st.LastError == "" {
			t.Errorf("event %d: dead %v, published %v, error %q; want a retry", i, !st.DeadAt.IsZero(), !st.PublishedAt.IsZero(), st.LastError)
		}
	}
	if out := logs.String(); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "BatchError") {
		t.Errorf("no error-level line about the misaligned BatchError:\n%s", out)
	}
}
