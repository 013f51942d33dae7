package core

import "context"

// DedupeKey names one application of an event's effect: the consumer (a
// stable name per effect, so two services consuming one event each apply it)
// and the event ID.
type DedupeKey struct {
	Consumer string
	EventID  ID
}

// Deduper applies an effect at most once per DedupeKey, recording the key in
// the same transaction as the effect, so redelivery is harmless.
type Deduper interface {
	// Once runs effect unless key was already recorded, and records key
	// atomically with it: if effect fails, nothing is recorded and a later
	// delivery runs it again. It reports whether effect ran and committed.
	// Concurrent calls with one key run effect once.
	//
	// Stores with transactions pass the transaction to effect through ctx
	// (postgres.TxFromContext, for example): the effect must write through
	// it to be atomic with the record.
	Once(ctx context.Context, key DedupeKey, effect func(ctx context.Context) error) (applied bool, err error)
}
