// Package wmtest is what the Watermill tests of this repository's modules
// share (adapters/watermill and its qstashsub package, and
// internal/interop/watermill): waits with deadlines, a minimal event, a
// Router run for the length of a test, and NATS JetStream streams,
// publishers and subscribers of a test's own.
//
// It is a module of its own because it needs Watermill and the NATS client,
// which the root module must not require, and tests in two other modules
// import it; it is under the root's internal/ so that nothing outside
// outboxkit can.
package wmtest
