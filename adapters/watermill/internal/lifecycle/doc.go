// Package lifecycle is what the Watermill subscribers of this module
// (outboxwatermill.OutboxSubscriber, qstashsub.Subscriber) share: the life
// of a subscription, from Subscribe until its context ends or the
// subscriber closes, and the wait for a handed-out message's
// acknowledgement, with a grace period while the subscriber stops.
//
// The sentinel errors are defined here and re-exported by outboxwatermill
// (outboxwatermill.ErrClosed is ErrClosed), so that both subscribers'
// errors match the same values.
package lifecycle
