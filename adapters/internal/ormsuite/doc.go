// Package ormsuite is the scenario every ORM's integration test runs, so
// GORM, bun, sqlx and ent are held to one bar (River's riverdrivertest is
// the model): events written in the ORM's own transaction commit and roll
// back with it, an effect written with the ORM through the Deduper's
// transaction is applied once and rolled back with its record, a Sequencer
// orders it, and OnceTx joins a transaction the caller already holds.
//
// An ORM's test opens its handle on Env.URL (a fresh schema, on the search
// path) and describes itself with a Driver:
//
//	func TestSuite(t *testing.T) {
//		ormsuite.Run(t, func(t *testing.T, env *ormsuite.Env) ormsuite.Driver {
//			db := openTheORM(t, env.URL) // closed when t ends
//			return ormsuite.Driver{DB: db.DB, PlaceOrder: ..., Invoice: ..., JoinTx: ...}
//		})
//	}
//
// It is a module of its own so that the adapters' modules share it without
// sharing their ORMs: it depends on outboxkit and pgx only.
package ormsuite
