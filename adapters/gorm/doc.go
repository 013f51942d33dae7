// Package outboxgorm puts outboxkit in GORM's transactions: events written
// in the transaction of the business change, and consumers whose effects,
// written with GORM, commit with the record that they were applied.
//
// It is a module of its own, so that services on pgx alone do not pull in
// GORM. It works with gorm.io/driver/postgres (pgx's database/sql driver
// underneath) and with PrepareStmt on or off.
//
// # Writing events
//
// Add writes through the transaction of a *gorm.DB: the tx of
// db.Transaction's callback, or what db.Begin returned. A *gorm.DB outside
// a transaction is refused (ErrNotInTransaction): its events would commit
// on their own.
//
//	store, err := postgres.New(sqlDB, &postgres.Config{}) // sqlDB, err := db.DB()
//
//	err = db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
//		if err := tx.Create(&Order{ID: id, Total: total}).Error; err != nil {
//			return err
//		}
//		e, err := core.NewEvent("order.placed", OrderPlaced{ID: id, Total: total})
//		if err != nil {
//			return err
//		}
//		return outboxgorm.Add(ctx, store, tx, e)
//	})
//
// Tx gives the same transaction to anything else of outboxkit that takes
// one (Deduper.OnceTx, Sequencer.OnceInOrderTx, Inbox.Accept, the Watermill
// transactional publisher's Adder).
//
// # Consuming events
//
// Open the Deduper (or Sequencer) on GORM's *sql.DB, and write the effect
// with Effect: its *gorm.DB runs in the Deduper's transaction, so the
// effect and the record of the event commit together, or not at all.
//
//	dedup, err := postgres.NewDeduper(sqlDB, nil)
//	mux.Register("order.paid", outboxgorm.Effect(db, func(ctx context.Context, tx *gorm.DB, e core.Event) error {
//		return tx.Create(&Invoice{EventID: e.ID.String(), OrderID: e.AggregateID}).Error
//	}))
//
// To apply an event inside a transaction you already hold, join it with
// Deduper.OnceTx: the effect runs in a savepoint, and a duplicate or a
// failed effect leaves the rest of the transaction to commit.
//
//	err = db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
//		conn, err := outboxgorm.Tx(tx)
//		if err != nil {
//			return err
//		}
//		_, err = dedup.OnceTx(ctx, conn, core.DedupeKey{Consumer: "invoicing", EventID: e.ID}, func(ctx context.Context) error {
//			return tx.Create(&Invoice{EventID: e.ID.String(), OrderID: e.AggregateID}).Error
//		})
//		return err
//	})
package outboxgorm
