package qstash

import (
	"context"
	"net/http"
	"strconv"
)

// Delivery describes the QStash delivery a handler is running for.
type Delivery struct {
	// MessageID is QStash's ID for the message (Upstash-Message-Id). It
	// changes when a relay republishes the same event, so never deduplicate
	// on it: the event's ID is the idempotency key.
	MessageID string
	// Retried counts the earlier failed attempts (Upstash-Retried): 0 on the
	// first delivery.
	Retried int
}

type deliveryKey struct{}

// WithDelivery returns a copy of ctx carrying d. The Receiver calls it before
// running the handler; tests of handlers call it to simulate a redelivery.
func WithDelivery(ctx context.Context, d Delivery) context.Context {
	return context.WithValue(ctx, deliveryKey{}, d)
}

// DeliveryFromContext returns the delivery a handler runs for, and false when
// ctx did not come from a Receiver (or WithDelivery).
func DeliveryFromContext(ctx context.Context) (Delivery, bool) {
	d, ok := ctx.Value(deliveryKey{}).(Delivery)
	return d, ok
}

// deliveryFromHeader reads QStash's delivery headers. A missing or garbled
// Upstash-Retried reads as 0: it is informational, and the signature does not
// cover headers anyway.
func deliveryFromHeader(h http.Header) Delivery {
	d := Delivery{MessageID: h.Get("Upstash-Message-Id")}
	if n, err := strconv.Atoi(h.Get("Upstash-Retried")); err == nil && n > 0 {
		d.Retried = n
	}
	return d
}
