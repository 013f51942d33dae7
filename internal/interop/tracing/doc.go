// Package tracing holds the tests of outboxkit's tracing package that need
// the OpenTelemetry SDK: spans recorded with sdk/trace's tracetest, metrics
// read with sdk/metric's ManualReader, and the end-to-end traces through
// qstashdev and PostgreSQL. They are black-box tests of the exported API
// (package tracing_test), the same as before they moved.
//
// They live in the internal/interop module because the tracing package
// itself depends on the OTel API only, and a test-only requirement of the
// root module would still reach every service importing outboxkit. Tests
// that need only the API stay beside the code, in tracing/.
package tracing
