package core

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Match them with errors.Is; the typed errors below wrap them
// and carry the details.
var (
	// ErrInvalidEvent is matched by every event validation failure.
	ErrInvalidEvent = errors.New("outboxkit: invalid event")
	// ErrInvalidID is matched when a string is not a UUID.
	ErrInvalidID = errors.New("outboxkit: invalid event ID")
	// ErrPayloadTooLarge is matched when a payload exceeds a configured limit.
	ErrPayloadTooLarge = errors.New("outboxkit: payload too large")
	// ErrLeaseLost is matched when a store refuses to settle events because the
	// lease token no longer matches: the lease expired and another relay (or a
	// replay) took the rows over. The caller must not retry the settle.
	ErrLeaseLost = errors.New("outboxkit: lease lost")
	// ErrUnknownEventType is matched by the error a Mux returns for an event
	// type it has no handler for: transient while the Mux's unknown-type retry
	// window is open, permanent after it (see Mux).
	ErrUnknownEventType = errors.New("outboxkit: no handler for event type")
	// ErrUnsupported is matched when an adapter lacks an optional capability
	// a request asks for.
	ErrUnsupported = errors.New("outboxkit: not supported by this adapter")
	// ErrInvalidConfig is matched by every configuration validation failure.
	ErrInvalidConfig = errors.New("outboxkit: invalid configuration")
	// ErrMisalignedBatch is matched by the error EventErrors gives every
	// event of a batch whose publisher returned a *BatchError of another
	// length (or a nil one): a publisher bug, after which the batch is
	// retried as a whole.
	ErrMisalignedBatch = errors.New("outboxkit: publisher returned a BatchError not aligned with its batch")
)

// ValidationError reports which field of an event is invalid and why. It
// matches ErrInvalidEvent (and ErrPayloadTooLarge or ErrInvalidID when that is
// the cause).
type ValidationError struct {
	// EventID is the ID of the offending event (zero if the ID itself is the
	// problem and could not be read).
	EventID ID
	// Field is the name of the invalid field, e.g. "Type" or "Payload".
	Field string
	// Reason says what is wrong and, where possible, what to do.
	Reason string
	// Err is an underlying sentinel such as ErrPayloadTooLarge, or nil.
	Err error
}

func (e *ValidationError) Error() string {
	if e.EventID.IsZero() {
		return fmt.Sprintf("outboxkit: invalid event: %s: %s", e.Field, e.Reason)
	}
	return fmt.Sprintf("outboxkit: invalid event %s: %s: %s", e.EventID, e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidEvent) true for every ValidationError.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidEvent }

// Unwrap returns the underlying sentinel, if any.
func (e *ValidationError) Unwrap() error { return e.Err }

// ConfigError reports an invalid configuration field. It matches
// ErrInvalidConfig.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("outboxkit: invalid configuration: %s: %s", e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidConfig) true for every ConfigError.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// LeaseLostError lists the events a store refused to settle because their
// lease token no longer matched. It matches ErrLeaseLost.
type LeaseLostError struct {
	IDs []ID
}

func (e *LeaseLostError) Error() string {
	return fmt.Sprintf("outboxkit: lease lost for %d event(s)", len(e.IDs))
}

// Is makes errors.Is(err, ErrLeaseLost) true.
func (e *LeaseLostError) Is(target error) bool { return target == ErrLeaseLost }

// permanentError marks an error that retrying cannot fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as permanent: the relay dead-letters the event at once
// instead of retrying it, and a consumer endpoint answers so that the transport
// stops redelivering. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or any error it wraps, was marked with
// Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// notAttemptedError marks an event a publisher never handed to its
// transport.
type notAttemptedError struct{ err error }

func (e *notAttemptedError) Error() string { return e.err.Error() }
func (e *notAttemptedError) Unwrap() error { return e.err }

// NotAttempted marks the error of an event the publisher gave back without
// trying it (the rest of a batch after a consumer stopped taking events, say).
// The relay releases such an event, restoring its attempt count, instead of
// counting a failure: a slow consumer must not dead-letter events it never
// saw. NotAttempted(nil) is nil.
func NotAttempted(err error) error {
	if err == nil {
		return nil
	}
	return &notAttemptedError{err: err}
}

// IsNotAttempted reports whether err, or any error it wraps, was marked with
// NotAttempted.
func IsNotAttempted(err error) bool {
	var n *notAttemptedError
	return errors.As(err, &n)
}

// retryAfterError carries a transport's hint about when to try again.
type retryAfterError struct {
	err   error
	after time.Duration
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

// RetryAfter marks a transient error with the delay the transport asked for
// (an HTTP 429's reset time, say). The relay waits at least that long before
// the next attempt, even when its own backoff would be shorter. RetryAfter(nil,
// d) is nil.
func RetryAfter(err error, after time.Duration) error {
	if err == nil {
		return nil
	}
	return &retryAfterError{err: err, after: after}
}

// RetryAfterHint returns the delay attached with RetryAfter, if any.
func RetryAfterHint(err error) (time.Duration, bool) {
	var r *retryAfterError
	if errors.As(err, &r) {
		return r.after, true
	}
	return 0, false
}

// BatchError reports the outcome of a partly failed batch publish: Errs is
// aligned with the events passed to Publish, and a nil entry means that event
// was published. A Publisher that returns any other non-nil error reports that
// every event of the batch failed with it.
type BatchError struct {
	Errs []error
}

// NewBatchError returns a BatchError for a batch of n events, all successful
// until Set says otherwise.
func NewBatchError(n int) *BatchError { return &BatchError{Errs: make([]error, n)} }

// Set records the outcome of the i-th event.
func (e *BatchError) Set(i int, err error) { e.Errs[i] = err }

// Failed counts the events that failed.
func (e *BatchError) Failed() int {
	if e == nil {
		return 0
	}
	n := 0
	for _, err := range e.Errs {
		if err != nil {
			n++
		}
	}
	return n
}

// ErrOrNil returns nil when no event failed, so a publisher can build a
// BatchError unconditionally and return e.ErrOrNil().
func (e *BatchError) ErrOrNil() error {
	if e.Failed() == 0 {
		return nil
	}
	return e
}

func (e *BatchError) Error() string {
	if e == nil {
		// A typed nil returned as an error: say so rather than panic in
		// whatever logs it.
		return "outboxkit: nil *BatchError"
	}
	for _, err := range e.Errs {
		if err != nil {
			return fmt.Sprintf("outboxkit: %d of %d event(s) failed to publish; first: %v", e.Failed(), len(e.Errs), err)
		}
	}
	return "outboxkit: batch published"
}

// Unwrap returns the per-event errors so errors.Is and errors.As see them.
func (e *BatchError) Unwrap() []error {
	if e == nil {
		return nil
	}
	out := make([]error, 0, len(e.Errs))
	for _, err := range e.Errs {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// EventErrors expands the error returned by Publisher.Publish into one error
// per event: nil for published events.
//
// A *BatchError of a length other than n, or a nil one, cannot say which
// event each of its entries belongs to, so none of them decides an event's
// fate: every event gets one transient error matching ErrMisalignedBatch,
// and is retried, rather than the whole batch being dead-lettered because
// some entry was permanent.
func EventErrors(n int, err error) []error {
	out := make([]error, n)
	if err == nil {
		return out
	}
	var be *BatchError
	if errors.As(err, &be) {
		if be != nil && len(be.Errs) == n {
			copy(out, be.Errs)
			return out
		}
		got := 0
		if be != nil {
			got = len(be.Errs)
		}
		// The text only: wrapping err would let its entries' Permanent,
		// NotAttempted and RetryAfter marks through.
		err = fmt.Errorf("%w: %d result(s) for a batch of %d event(s): %s", ErrMisalignedBatch, got, n, err.Error())
	}
	for i := range out {
		out[i] = err
	}
	return out
}
