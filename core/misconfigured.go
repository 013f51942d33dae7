package core

import "errors"

// ErrMisconfigured is matched by publish errors that say nothing about the
// event itself: the transport refused the relay's configuration (a bad
// destination URL, an unknown queue or URL group, a wrong token, no route
// for the event's type). Counting such failures against the event would
// dead-letter the whole outbox within minutes of a bad deploy, so the relay
// defers these events instead: they stay pending with their attempt count
// untouched, come back after a backoff that grows while the failures last
// (RelayConfig.Retry, counted in consecutive failed batches rather than per
// event), and every failed batch is logged at error level with the cause.
// A permanent error (Permanent) wins over this mark.
var ErrMisconfigured = errors.New("outboxkit: refused because of configuration, not because of the event")

// misconfiguredError marks an error as caused by configuration.
type misconfiguredError struct{ err error }

func (e *misconfiguredError) Error() string        { return e.err.Error() }
func (e *misconfiguredError) Unwrap() error        { return e.err }
func (e *misconfiguredError) Is(target error) bool { return target == ErrMisconfigured }

// Misconfigured marks err as caused by the relay's or the transport's
// configuration rather than by the event (see ErrMisconfigured). A
// publisher may instead return errors whose Is method matches
// ErrMisconfigured. Misconfigured(nil) is nil.
func Misconfigured(err error) error {
	if err == nil {
		return nil
	}
	return &misconfiguredError{err: err}
}

// IsMisconfigured reports whether err matches ErrMisconfigured and is not
// marked Permanent.
func IsMisconfigured(err error) bool {
	return err != nil && errors.Is(err, ErrMisconfigured) && !IsPermanent(err)
}
