package wmtest

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
)

// RunRouter runs router until the test ends, and returns once it is
// running. The test fails if the router stops with an error, or before it
// ran. Subscribers and publishers the test closes in its own Cleanup
// functions, registered before RunRouter, are closed after the router
// stopped.
func RunRouter(t testing.TB, router *message.Router) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- router.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("router: %v", err)
		}
	})
	select {
	case <-router.Running():
	case err := <-done:
		done <- nil // reported here, not again by the cleanup
		t.Fatalf("router stopped before running: %v", err)
	}
}
