// Package qstashsdk checks outboxkit's QStash code against the official Go
// SDK (github.com/upstash/qstash-go), unmodified, as the reference client:
// the SDK drives qstashdev through publish, URL groups, batches, queues,
// the DLQ, messages, events and keys, and its verifier gets every row of
// the signature matrix (internal/sigmatrix) to show where it is weaker than
// qstash.Verifier.
//
// It holds tests only. It is in the internal/interop module so that the
// root module, whose requirements every service importing outboxkit
// inherits, never requires the SDK. The harness and the matrix these tests
// share with the qstash and qstashdev tests are in the root module
// (internal/qstashdevtest, internal/sigmatrix), one copy each.
package qstashsdk
