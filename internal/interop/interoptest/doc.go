// Package interoptest is what the test packages of the internal/interop
// module share: a tracer provider that records every span, assertions on
// the recorded spans, and a PostgreSQL outbox whose store records the
// writer's trace context (tracing.NewInjector as its BeforeAdd), with the
// business tables of an order-and-shipping scenario.
//
// It exists so that a test package of its own (internal/interop/watermill)
// can use them without keeping copies; it imports the OpenTelemetry SDK,
// which is why it lives in this module.
package interoptest
