// Package qstashdevtest runs a qstashdev server for tests: a Harness
// serving its API over httptest, a Sink that records what it delivers, and a
// FakeClock for schedules and backoff. The qstashdev package's own tests
// and the interop module's tests (the official QStash SDK driving
// qstashdev, in internal/interop/qstashsdk) share this one copy.
//
//	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
//	dst := qstashdevtest.NewSink(t, nil) // answers 200
//	id := h.Publish(dst.URL("/orders"), nil, `{"id":1}`)
//	h.WaitIdle()
//	got := dst.Deliveries()
//
// Everything fails the test instead of returning an error, and every wait is
// bounded by WaitTimeout. It is internal: the API follows what the tests
// need and promises nothing to users, who drive qstashdev.Server directly
// (see its package documentation).
package qstashdevtest
