// Package interop is the root of the internal/interop module, where the
// tests that need third-party SDKs live: the OpenTelemetry SDK
// (internal/interop/tracing), the official QStash Go SDK
// (internal/interop/qstashsdk) and the official QStash TypeScript SDK,
// run with Node.js from a Go test (internal/interop/qstashts).
//
// It is a module of its own because Go's module graph pruning hands every
// requirement of the root go.mod, test-only ones included, to every service
// that imports outboxkit. With these tests here, a service importing core,
// postgres, qstash and tracing inherits pgx, golang-jwt and the OTel API,
// nothing more (internal/repocheck checks it). go.work joins this module to
// the others, so `go test ./internal/interop/...` from the root runs it;
// its go.mod replaces outboxkit with the checkout it is in.
//
// The tests here import the root module's internal test helpers
// (internal/pgtest, internal/qstashdevtest, internal/sigmatrix) rather than
// keeping copies of them.
package interop
