// Package interoptest is what the test packages of the internal/interop
// module share: a tracer provider that records every span, assertions on
// the recorded spans, and a PostgreSQL outbox whose store records the
// writer's trace context (tracing.NewInjector as its BeforeAdd), with the
// business tables of an order-and-shipping scenario.
//
// It exists so that the module's test packages (internal/interop/tracing,
// internal/interop/watermill) use one copy of them; it imports the OpenTelemetry SDK,
// which is why it lives in this module.
package interoptest
