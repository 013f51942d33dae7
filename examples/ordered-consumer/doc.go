// Command ordered-consumer shows a consumer that applies each order's
// status events in order although the transport delivers them out of
// order, against the local PostgreSQL and an in-process QStash:
//
//	go run ./examples/ordered-consumer
//
// The producer moves a few hundred orders through placed → paid → shipped
// → delivered, each step one transaction that updates the order and adds
// its event. The store has ordering on, so every event carries its order's
// sequence (1 to 4) and the relay publishes an order's next event only
// after QStash accepted the previous one. That is not enough for order at
// the consumer: qstashdev delivers with several workers at once and
// retries failed attempts later, so a "paid" event regularly arrives while
// its "placed" event is still in flight or waiting for a retry.
//
// The consumer endpoint is a qstash.Receiver whose Deduper is a
// postgres.Sequencer, in front of a core.Mux with one core.Typed handler
// per status. The Sequencer keeps, per order, the last sequence applied:
//
//   - the next event in order runs its handler, and the new last sequence
//     commits in the handler's transaction;
//   - an early event (a gap) runs nothing and is answered 503 with
//     Retry-After, so QStash delivers it again shortly;
//   - a stale event (already applied) runs nothing and is answered 200, so
//     QStash stops delivering it.
//
// Faults are injected on purpose: the handler fails the first time it
// runs for every 7th event (500: QStash retries it, and its successors
// arrive early), the endpoint loses the acknowledgement of every 25th
// event (it answers 500 after the effect committed, so QStash delivers it
// again and it is stale), and at the end an operator replays 20 events
// that were applied long ago (stale too). qstashdev's delays are scaled
// down a hundredfold, so a retry or a gap's Retry-After takes 10ms.
//
// The run ends with a summary and exits non-zero unless every order ended
// delivered, every event was applied exactly once and in order (checked
// from the consumer's tables), nothing was dead-lettered and the outbox
// drained. DATABASE_URL (or -database-url) selects the database; the
// default is the local server.
package main
