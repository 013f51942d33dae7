// Package memory holds in-memory reference implementations of outboxkit's
// contracts: a Store, a Publisher and a Deduper. They are safe for concurrent
// use and pass every core/coretest suite, which makes them both a specification
// by example for adapter authors and handy fakes for tests.
//
// Nothing here survives a restart: do not use these in production.
//
//	store := memory.NewStore(nil)
//	pub := memory.NewPublisher()
//	relay, _ := core.NewRelay(store, pub, nil)
//	_ = store.Add(ctx, event) // the write side: no transaction to join
//	go relay.Run(ctx)
package memory
