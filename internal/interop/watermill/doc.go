// Package watermill holds the end-to-end trace tests through Watermill:
// outboxkit's tracing package, the PostgreSQL store and the
// outboxwatermill adapter, with spans recorded by the OpenTelemetry SDK, one
// test over NATS JetStream and one with PostgreSQL as the broker
// (outboxwatermill.OutboxSubscriber). They are black-box tests (package
// watermill_test).
//
// They live in the internal/interop module because they need the
// OpenTelemetry SDK and Watermill, which neither the root module nor
// adapters/watermill may require.
package watermill
