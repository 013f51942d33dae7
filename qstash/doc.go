// Package qstash connects outboxkit to Upstash QStash: a Publisher the relay
// uses to hand events to QStash, and a Receiver, the http.Handler of the
// consumer endpoints QStash delivers them to.
//
// # Publishing
//
//	pub, err := qstash.NewPublisher(&qstash.PublisherConfig{
//		BaseURL:     os.Getenv("QSTASH_URL"), // "" means https://qstash.upstash.io
//		Token:       os.Getenv("QSTASH_TOKEN"),
//		Destination: qstash.Target{URL: "https://billing.example.com/qstash/orders"},
//		Routes: map[string]qstash.Target{
//			"order.shipped": {URLGroup: "shipping"},
//		},
//		FlowControl: &qstash.FlowControl{Parallelism: 1}, // one delivery at a time per aggregate
//	})
//	if err != nil { ... }
//	defer pub.Close()
//	relay, err := core.NewRelay(store, pub, nil)
//
// A Publish of several events is one POST /v2/batch (split every
// MaxBatchSize events); a single event is one POST /v2/publish (or
// /v2/enqueue when its Target has a Queue). Each message carries:
//
//   - the event as a CloudEvents structured-mode JSON document (Content-Type
//     application/cloudevents+json): id, type, source, time, subject (the
//     aggregate ID), aggregatetype, schemaversion, sequence, traceparent,
//     tracestate, custom headers and the payload as "data", all in the body
//     QStash signs (EncodeStructuredEvent). PublisherConfig.ContentMode
//     BinaryMode sends the payload as the body instead, and the attributes
//     as CloudEvents binary-mode headers (ce-id, ce-type, ...), each sent as
//     Upstash-Forward-<name>, which QStash delivers but does not sign;
//   - Upstash-Deduplication-Id = the event ID, so a relay that republishes
//     after a crash is deduplicated by QStash within its 10-minute window
//     (the consumer's Deduper covers the rest);
//   - Upstash-Not-Before when Event.AvailableAt is in the future;
//   - the configured options: retries, retry delay, timeout, delay,
//     callbacks, label, and flow control keyed by the aggregate
//     (Event.AggregateKey) unless FlowControl.Key says otherwise.
//
// Routing: PublisherConfig.Route decides everything when set; otherwise a
// non-empty Event.Destination (a URL or a URL group name) replaces the
// destination, Routes picks a target per event type, and Destination is the
// fallback.
//
// Errors follow core's conventions so the relay retries what can succeed and
// dead-letters only what cannot: an event is dead-lettered for what the
// event itself is, never for the publisher's configuration. Publish returns
// a *core.BatchError aligned with its input when QStash refused only some
// messages of a batch.
//
//	Answer or failure                        Error                                  Relay
//	2xx (including 202 "deduplicated")       nil                                    published
//	413, or 400/batch element about size     core.Permanent(*APIError)              dead-letter
//	  (a 413 for a whole batch: each event is sent again on its own)
//	400, 404, 405 (destination, URL group,   *APIError matching ErrConfiguration    retry (fix the configuration)
//	  queue, options, BaseURL), other batch
//	  element errors
//	401, 403 (token), 412 (plan limit)       *APIError matching ErrConfiguration    retry (fix the account)
//	429                                      core.RetryAfter(*APIError, reset)      retry, not before reset
//	5xx, 3xx, 408                            *APIError (RetryAfter if announced)    retry
//	network error, ctx done                  wrapped error                          retry
//	no route for the event                   ErrNoRoute, matching ErrConfiguration  retry (add a route)
//	invalid Event.Destination, unsendable    core.Permanent(...)                    dead-letter
//	  header
//
// A configuration error's text says what to fix ("QStash knows no such URL
// group or queue, or PublisherConfig.BaseURL is not the QStash API; ...; the
// events stay pending, not dead-lettered, until it is fixed"), so the
// relay's warning is enough to act on. They are retried with the relay's
// backoff and still count towards RetryPolicy.MaxAttempts.
//
// The reset of a 429 is read from RateLimit-Reset (daily quota) or
// Burst-RateLimit-Reset (unix seconds), or Retry-After.
//
// The official Go SDK (github.com/upstash/qstash-go v1.0.0) is not used to
// publish: it has no context.Context, cannot send flow control, retry delay
// or labels, never closes response bodies, loses the status of non-JSON
// errors, panics on a missing token and reads QSTASH_URL behind the
// caller's back. Nor does this package read QSTASH_URL: programs pass it in.
//
// # Receiving
//
// A consumer endpoint verifies the delivery, decodes the event and applies
// its effect once, in the same transaction as the record that it was
// applied. With PostgreSQL:
//
//	dedup, err := postgres.NewDeduper(pool, nil)
//	if err != nil { ... }
//	mux := core.NewMux()
//	mux.Register("order.confirmed", postgres.Effect(func(ctx context.Context, tx pgx.Tx, e core.Event) error {
//		_, err := tx.Exec(ctx, `UPDATE invoices SET confirmed = true WHERE order_id = $1`, e.AggregateID)
//		return err
//	}))
//	rc, err := qstash.NewReceiver(&qstash.ReceiverConfig{
//		CurrentSigningKey: os.Getenv("QSTASH_CURRENT_SIGNING_KEY"),
//		NextSigningKey:    os.Getenv("QSTASH_NEXT_SIGNING_KEY"),
//		URL:               "https://billing.example.com/qstash/orders", // exactly as published
//		Handler:           mux,
//		Deduper:           tracing.Deduper(dedup),          // records applied/duplicate on the span
//		Consumer:          "billing",
//		Middleware:        []core.HandlerMiddleware{tracing.HandlerMiddleware()}, // a consumer span per delivery
//	})
//	if err != nil { ... }
//	http.Handle("POST /qstash/orders", rc)
//
// The handler learns QStash's message ID and retry count from
// DeliveryFromContext; OnDecision tells tracing and metrics whether each
// delivery was applied, a duplicate, or refused and why.
//
// # What is verified, and why
//
// QStash signs two things about a delivery: the URL it was sent to (the
// token's sub claim) and the body (its SHA-256, the body claim). Headers,
// forwarded ones included, are not signed. So the Receiver reads the event
// from the body alone: a structured-mode document whose ID, type, source,
// aggregate, sequence, schema version, time, trace context and custom
// headers are all covered by the signature; ce-* headers on the request are
// ignored. A binary-mode delivery, whose attributes would come from those
// unsigned headers, is answered 415 unless ReceiverConfig.AllowBinaryMode
// accepts the risk.
//
// Anyone can POST to a public endpoint; only QStash holds the signing keys.
// Verifier accepts an Upstash-Signature only if it is an HS256 JWT (no other
// algorithm, so "none" and key-confusion tricks are out) whose HMAC matches
// the current or the next key (the next one keeps deliveries flowing while
// keys rotate), whose iss is "Upstash", whose sub is exactly the configured
// URL (a token for another endpoint cannot be replayed here), whose exp is
// present and not past and whose nbf and iat are not in the future (within
// DefaultLeeway of clock skew: a captured token dies after QStash's 5
// minutes), and whose body claim is the SHA-256 of the exact body received
// (a valid token cannot carry another body). Empty keys are refused when the
// Verifier is built, since an unset variable must not become a key anyone
// can sign with. The official SDK's verifier is weaker on each of these
// points except the body hash.
//
// A multi-region account (QStash's regions are independent, each with its
// own token and signing keys) publishes with one Publisher per region
// (PublisherConfig.Region picks the region's API) and receives with the
// keys of every region in ReceiverConfig.Regions: each delivery is
// verified with the keys of the region its Upstash-Region header names.
// That header is not signed, so it only chooses among keys the receiver
// trusts anyway; a delivery without it gets the default keys, or 401 when
// there are none.
//
// A valid signature proves the request came from QStash, not that it is
// new. Whoever captures a delivery can send its token and body again until
// the token expires; QStash signs every attempt with a token of its own
// (each with a unique jti), so the Receiver's ReplayGuard accepts a token
// once and answers a second presentation 401. The default guard is in
// memory, per process; instances of one consumer share one
// (postgres.TokenGuard) so that a replay sent to another instance is caught
// too. QStash still retries, and relays may publish an event twice, under
// fresh tokens: that is what the Deduper is for, keyed by the event ID from
// the signed body, never by QStash's message ID (which changes on
// republish).
//
// # Status codes
//
//	Status  When                                          QStash then          Effect
//	200     effect committed now                          done                 applied
//	200     event already recorded by the Deduper         done                 none (duplicate)
//	400     CloudEvents document (or, in binary mode,     retries, then DLQ    none
//	        headers) missing or malformed
//	401     signature missing or invalid, or its token    retries, then DLQ    none
//	        already accepted (a replay)
//	405     not a POST                                    retries, then DLQ    none
//	413     body over MaxBodyBytes                        retries, then DLQ    none
//	415     not structured mode, AllowBinaryMode off      retries, then DLQ    none
//	489     handler returned core.Permanent               DLQ at once          rolled back
//	        (with Upstash-NonRetryable-Error: true)
//	500     handler, Deduper or ReplayGuard failed, or    retries              rolled back
//	        the handler panicked
//	503     as 500, with the error's core.RetryAfter      retries after it     rolled back
//	        hint as Retry-After
//
// Bodies are small JSON documents ({"status":"applied","eventId":...});
// error details go to the Logger, not to the response, because QStash keeps
// failed responses in its DLQ.
//
// # An inbox for slow handlers
//
// A Receiver answers only once the effect committed, so a handler slower
// than QStash's delivery timeout (Upstash-Timeout, or the plan's limit)
// never gets its 200: QStash retries a delivery whose effect may well have
// committed, and finally dead-letters it. Give such a consumer an inbox
// (postgres.Inbox) and serve it with NewInboxReceiver: the receiver still
// verifies the signature, the replay guard and the body, then writes the
// event into the consumer's inbox table (one INSERT ... ON CONFLICT DO
// NOTHING, deduplicated by event ID) and answers 200 as soon as that row
// is committed, within milliseconds. The inbox's workers, relays over the
// inbox table whose publisher is the handler (core.HandlerPublisher), apply
// it later through a Deduper, with leases, retries with backoff, dead
// letters, per-aggregate order, the relay's hooks and metrics, and
// outboxctl's status, dlq, replay and prune on --table <consumer>_inbox.
//
//	inbox, _ := postgres.NewInbox(pool, &postgres.InboxConfig{
//		Consumer: "billing",
//		Store:    postgres.Config{Ordering: true},
//		Handler:  postgres.Effect(applyInvoice),
//	})
//	rc, _ := qstash.NewInboxReceiver(inbox, &qstash.ReceiverConfig{CurrentSigningKey: cur, NextSigningKey: next, URL: url})
//	go inbox.Run(ctx)
//
// The status table above then describes the inbox write: 200 "applied"
// means accepted into the inbox, 200 "duplicate" already there, 489 an
// event the inbox cannot store, 500 a database failure. The handler's
// failures are the workers' to retry and dead-letter, in the inbox table,
// not in QStash's DLQ. The inbox keeps the event as delivered, trace
// context included, so a worker's tracing.HandlerMiddleware continues the
// producer's trace. The promise does not change: at least once into the
// inbox, at least once from it to the handler, and the effect exactly once
// through the Deduper (see postgres.Inbox, which also says what per-aggregate
// order holds). Any other transport adapter that takes a core.Handler can
// write into the inbox through its Handle method.
//
// # A relay run by a schedule
//
// On a platform with no long-running process (a serverless function), a
// QStash schedule runs the relay: a DrainHandler verifies each scheduled
// delivery like a Receiver and runs one bounded drain of the outbox
// (core.Relay.DrainWithin) within DrainHandlerConfig.Budget (25s by
// default), answering with a JSON report of what it did. A run that meets
// its budget, or is killed, loses nothing: published events are settled,
// the batch in flight is released, and the next run goes on.
//
//	relay, _ := core.NewRelay(store, pub, nil)
//	dh, _ := qstash.NewDrainHandler(&qstash.DrainHandlerConfig{
//		CurrentSigningKey: cur, NextSigningKey: next,
//		URL: "https://relay.example.com/drain", Relay: relay,
//	})
//	http.Handle("POST /drain", dh)
//	// once: POST /v2/schedules/https://relay.example.com/drain, Upstash-Cron: * * * * *
//
// examples/serverless-relay runs it against a qstashdev schedule.
//
// # Testing
//
// Package qstashdev is an in-memory QStash for tests and local development:
// point BaseURL at it and configure the Receiver with its default keys.
// Signer mints tokens the way QStash does, for tests that call a Receiver
// directly.
package qstash
