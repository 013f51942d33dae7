package main

// Prototypes of proposed changes to postgres/ and core/, measured beside
// the real thing with -proposals. They are not products: each exists to put
// a number on a proposal in docs/BENCHMARKS.md. (Earlier proposals that
// were adopted — settling by row address, NOTIFY after COMMIT — are now the
// store's own code and measured as such.)

// synchronous_commit=off on the relay's connections (asyncCommit): the
// claim and the settlement then return without waiting for their WAL flush.
// Visibility is unchanged (other relays see a lease as soon as it commits),
// so leases and fencing work as before. What changes is durability across
// a PostgreSQL crash: a lease or an outcome committed in the last few
// hundred milliseconds before the crash may be lost, and those events are
// published again (a lost lease) or retried (a lost outcome). That is
// within at-least-once delivery, but it is more redelivery after a database
// crash, so it is a decision for the maintainers, not a default; the
// business transactions (Add) are not affected.

// asyncCommit is the session setting of the synchronous_commit=off
// proposal.
func asyncCommit() []string { return []string{"synchronous_commit", "off"} }
