// Package qstashdev is an in-memory QStash: a local stand-in for Upstash's
// message queue that speaks its REST API, signs and delivers messages the
// way QStash does, and can be driven from tests. The official Go SDK
// (github.com/upstash/qstash-go) works against it unchanged, and it
// accepts the credentials of Upstash's own dev server, so tooling that
// targets "QStash on localhost:8080" needs no changes. So does the official
// TypeScript SDK (@upstash/qstash 2.12.0, internal/interop/qstashts), whose
// bulk requests send IDs and filters as query parameters. docs/QSTASHDEV.md
// lists every API area with how it is tested and where qstashdev differs.
//
// # In a test
//
//	srv, err := qstashdev.New(qstashdev.Config{BackoffScale: 0.001})
//	if err != nil { ... }
//	defer srv.Close()
//	api := httptest.NewServer(srv.Handler())
//	defer api.Close()
//
//	// Point the code under test (or the SDK: qstash.Options{Url: api.URL};
//	// note that QSTASH_URL in the environment overrides it) at api.URL
//	// with token qstashdev.DefaultToken, publish, then:
//	err = srv.WaitIdle(ctx)   // everything delivered, failed or cancelled
//	dlq := srv.DLQ()          // what failed, with the last response
//
// Receivers verify deliveries with DefaultCurrentSigningKey and
// DefaultNextSigningKey (or the keys in Config).
//
// Time is under the test's control: BackoffScale shrinks retry delays
// (0.001 turns QStash's 12s first retry into 12ms), and Config.Clock takes a
// fake clock that moves delays, not-before times, retries, flow-control
// windows and deduplication windows. WaitFor blocks until a condition over
// the server's state holds (a RETRY event, a DLQ entry), re-checking after
// every change; WaitIdle waits for all messages to settle. Neither polls.
// Config.Reject injects error answers, such as the 429s built by
// RateLimited and BurstRateLimited, to test a publisher's back-off.
//
// # As a process
//
//	go run ./contrib/outboxctl qstash-dev --addr 127.0.0.1:8080
//
// serves the API on an address and prints the credentials. ListenAndServe
// and Serve do the same from Go. DefaultToken is public, so with it they
// serve on loopback only; any other address (0.0.0.0 in a container) needs
// Config.Token (outboxctl qstash-dev --token), or fails with ErrPublicToken.
//
// # API
//
// Every path needs "Authorization: Bearer <token>" or ?qstash_token=;
// errors are JSON {"error": "..."}. A publish path's query string is the
// destination's own, minus qstash_token in any spelling (escaped or not,
// after ';' or '&'), so the token never reaches a destination, a
// signature, the event log or the DLQ.
//
// Browsers are kept out, because the default token is public and any page
// a developer visits could otherwise publish through their server: a
// request with an Origin other than the server's own or one of
// Config.AllowedOrigins (which get CORS answers) is refused with 403, and
// with the default token so is a request whose Host is not localhost or a
// loopback IP (a DNS-rebinding page). SDKs, curl and relays send no
// Origin and address the server by the URL they were given.
//
//	POST   /v2/publish/{url or url group}       publish; 200 {messageId}, a group answers [{messageId,url}]
//	POST   /v2/enqueue/{queue}/{url or group}   publish through a FIFO queue (created on first use, parallelism 1)
//	POST   /v2/batch                            [{destination,headers,body,queue}] → answers aligned with the input
//	GET    /v2/messages/{id}                    a message not yet settled (404 once delivered, failed or cancelled)
//	DELETE /v2/messages/{id}                    cancel: 202 {"cancelled":1}
//	DELETE /v2/messages                         bulk cancel: messageIds, else filters, else all → 202 {"cancelled":n}
//	GET    /v2/events, /v2/logs                 the log, newest first, with cursor, count, order, messageIds and filters
//	GET    /v2/dlq, /v2/dlq/{dlqId}             dead letters with the last response (cursor, count ≤ 100, dlqIds, filters)
//	DELETE /v2/dlq/{dlqId}, /v2/dlq             delete one, or in bulk (dlqIds, else filters, else all) → {"deleted":n}
//	POST   /v2/dlq/retry/{dlqId}, /v2/dlq/retry republish as new messages: 201 {messageId} or {"responses":[...]}
//	POST   /v2/queues  GET /v2/queues[/{q}]     upsert {queueName,parallelism,paused}; list; get (with lag)
//	DELETE /v2/queues/{q}                       delete, cancelling what it still holds
//	POST   /v2/queues/{q}/pause|resume
//	GET    /v2/topics[/{g}], DELETE /v2/topics/{g}, POST|DELETE /v2/topics/{g}/endpoints   URL groups
//	POST   /v2/schedules/{url or group}         create or update (Upstash-Cron, Upstash-Schedule-Id) → {scheduleId}
//	GET    /v2/schedules[/{id}], DELETE /v2/schedules/{id}, POST|PATCH /v2/schedules/{id}/pause|resume
//	GET    /v2/flowControl[/{key}], POST /v2/flowControl/{key}/pause|resume|pin|unpin|resetRate
//	GET    /v2/globalParallelism
//	GET    /v2/keys, POST /v2/keys/rotate, POST /v2/rotate   signing keys {current,next}
//
// Bulk and list requests take IDs and filters as query parameters, several
// values either repeated (label=a&label=b) or comma-separated (label=a,b;
// not for url and path, which may hold commas), OR within a filter and AND
// across filters, as the TypeScript SDK sends them and Upstash's API
// reference documents them; IDs in a JSON body ({"messageIds"},
// {"dlqIds"}, the Go SDK's form) are read too. The filters are messageId,
// url, topicName (or urlGroup), scheduleId, queueName, label,
// flowControlKey, callerIp, fromDate and toDate (unix ms, inclusive), plus
// state (with IN_PROGRESS for ACTIVE, RETRY or ERROR) and host and path on
// the log and the bulk cancel, and responseStatus on the DLQ. A bulk
// cancel, delete or retry refuses, with 400, a parameter it does not know
// and an empty value, so that a typo never widens it to everything; lists
// ignore unknown parameters.
//
// Publish headers: Content-Type and Upstash-Forward-<X> are delivered (the
// latter as <X>); Upstash-Method, -Retries (default 3), -Retry-Delay (an
// expression in ms over "retried" with + - * / ( ) and pow sqrt abs exp
// floor ceil round min max), -Delay ("10s", "1d10h30m"), -Not-Before (unix
// seconds, wins over Delay), -Timeout, -Callback and -Failure-Callback
// (with -Callback-Forward-*, -Callback-Retries, -Callback-Method,
// -Callback-Timeout and the -Failure-Callback-* counterparts),
// -Deduplication-Id, -Content-Based-Deduplication, -Flow-Control-Key with
// -Flow-Control-Value "parallelism=<n>, rate=<n>, period=<dur>", -Label
// (several labels comma-separated, each a filter; the API lists them as
// labels, and label is the first) and -Redact-Fields (body, headers or
// header[<name>]: the REST API shows those values as REDACTED:<hex
// SHA-256>, deliveries carry the real ones).
//
// # Delivery
//
// Each attempt sends the method, the body unchanged, the forwarded headers,
// User-Agent: Upstash-QStash, Upstash-Message-Id, Upstash-Retried (0 on the
// first attempt), Upstash-Caller-Ip, Upstash-Topic-Name (URL groups),
// Upstash-Schedule-Id (runs of a schedule), Upstash-Region (Config.Region,
// "EU-CENTRAL-1" by default) and
// Upstash-Signature: an HS256 JWT keyed with the whole current signing-key
// string, with iss "Upstash", sub the exact destination URL, iat, exp =
// iat+300, nbf = iat, a random jti, and body = base64url(SHA-256(body))
// with '=' padding.
//
// Any 2xx delivers; anything else, a connection error or a timeout fails
// the attempt, and redirects are not followed. Retry n waits for the
// response's Retry-After (or X-RateLimit-Reset; seconds, an HTTP date or a
// Go duration; over a day is ignored), else the Upstash-Retry-Delay
// expression with retried = n-1, else Config.Backoff(n), QStash's
// min(86400, e^(2.5n)) seconds by default; all times BackoffScale. A 489
// with Upstash-NonRetryable-Error: true fails at once. After the last
// attempt the message goes to the DLQ with that attempt's status, headers
// and body, and a failure callback is sent. Callbacks follow every attempt
// that got a response. Both are new signed messages whose JSON carries
// status, header, base64 body, retried, maxRetries, sourceMessageId, url,
// method, sourceHeader, base64 sourceBody, notBefore, createdAt and, for
// the failure callback, dlqId.
//
// Events follow QStash's states: CREATED → ACTIVE → DELIVERED, or ACTIVE →
// ERROR → RETRY → ACTIVE … → FAILED; a cancel adds CANCEL_REQUESTED →
// CANCELLED.
//
// Queues deliver in order: a started message holds one of the queue's
// parallelism slots through its retries, so with parallelism 1 the next
// message waits until the current one is delivered or failed. A flow-control
// key bounds attempts in flight (parallelism) and attempt starts per period
// (rate, a fixed window) across every URL that shares the key; excess
// messages wait in arrival order and are never refused. The latest publish's
// limits apply to the key.
//
// # Throughput
//
// A fixed pool of Config.Concurrency workers makes the attempts (no
// goroutine per message). For plain-http destinations the default client
// writes requests on connections each worker owns, skipping net/http's
// per-request goroutine hand-offs; https, proxied hosts and a Config.Client
// go through net/http. A pooled connection the destination closed while it
// sat idle (a consumer restart, a keep-alive timeout) is not a failed
// attempt: the request is sent again at once on a fresh connection, and the
// host's other idle connections are dropped with it. BenchmarkBatchDelivery relays batches of 100 through
// /v2/batch into a local receiver and reports events/s and CPU per event:
// about 50µs of CPU per event for server, receiver and client together,
// which is over 20,000 events/s on 2 cores.
//
//	go test -run '^$' -bench BatchDelivery -cpu 2 ./qstash/qstashdev/
//
// # Where qstashdev differs from QStash
//
//   - State lives in memory: nothing survives Close, and Shutdown drops
//     undelivered messages. The event log, the DLQ and the deduplication
//     index are bounded (Config.MaxEvents, MaxDLQ and MaxDLQBytes,
//     MaxDeduplicationKeys) rather than kept for days; the oldest entries
//     go first.
//   - Pending messages (delayed, queued, retrying, in flight) are bounded
//     too: Config.MaxPendingMessages (200,000) and MaxPendingBytes (body,
//     URL, headers and option strings, 64 MiB). A publish, enqueue or batch beyond them
//     is refused whole with 429, {"error": "..."} and Retry-After: 1, the
//     answer a publisher already backs off from; callbacks and DLQ retries
//     are never refused, but count. Queues and URL groups, which outlive
//     their messages, are bounded by Config.MaxQueues and MaxURLGroups
//     (1,000 each, then 412), a group holds at most 1,000 endpoints, URLs
//     are at most 16 KiB and labels, deduplication ids and flow-control
//     keys 4 KiB (then 400).
//   - API destinations ("api/...", LLM providers) are refused, and filter
//     cancels run at once: there are no bulk actions (async=true is
//     accepted and changes nothing). DLQ retries do not take override
//     headers. The log keeps no message headers or bodies.
//   - A server plays one region (Config.Region); QStash's regions are
//     independent services, so a multi-region test runs one server per
//     region, each with its own keys.
//   - A flow-control key is forgotten once idle unless paused or pinned;
//     GET /v2/flowControl/{key} then answers 404.
//   - An attempt times out after Config.Timeout (30s) unless the message
//     sets Upstash-Timeout; QStash's default is its plan maximum.
//   - Unsettled details, decided here: a new message answers 200 (201 has
//     been seen from QStash); nbf equals iat; a bad batch element answers
//     {"error": "..."} in its place; callback notBefore and createdAt are
//     millisecond strings, as QStash documents them; an attempt with no
//     response sends no callback (the failure callback still fires, with
//     status 0); Upstash-Retry-Delay's retried is n-1 for retry n; a delayed
//     message at a queue's head holds its slot until due, keeping FIFO.
//   - Cancelling a message in flight lets the attempt finish; a success is
//     still recorded as DELIVERED, a failure is not retried (CANCELLED).
//   - Deleting a queue cancels the messages it holds; pausing one stops new
//     starts but lets started messages finish their retries.
//   - Message ids are unique per server and ordered by creation, but not
//     QStash's KSUIDs; treat them as opaque, as QStash asks.
//   - The cancelled state is CANCELLED, as QStash's API reference and its
//     logs spell it; the SDKs' types say CANCELED (the TypeScript SDK's
//     State, the Go SDK v1.0.0's Canceled constant). A state filter takes
//     either spelling.
//   - With a fake Clock, JWT times come from it too; verifiers with real
//     time then need a tolerance, or a clock near the real time.
package qstashdev
