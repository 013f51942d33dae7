package databases

import (
	"context"
	"database/sql"
	"errors"

	"gorm.io/gorm"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// Order is the orders table's row, as GORM and bun map it.
type Order struct {
	ID    string `gorm:"primaryKey" bun:"id,pk"`
	Cents int64  `bun:"cents,notnull"`
}

// PlaceOrderGORM writes an order and its event in one GORM transaction,
// with nothing but the seam: inside Transaction, GORM's connection is the
// *sql.Tx (with PrepareStmt off). The store is on GORM's *sql.DB:
// sqlDB, err := db.DB().
func PlaceOrderGORM(ctx context.Context, db *gorm.DB, store *postgres.Store, id string, cents int64) error {
	return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&Order{ID: id, Cents: cents}).Error; err != nil {
			return err
		}
		sqlTx, ok := tx.Statement.ConnPool.(*sql.Tx)
		if !ok {
			return errors.New("not in a database/sql transaction (PrepareStmt on?)")
		}
		e, err := core.NewEvent("order.placed", OrderPlaced{ID: id, Cents: cents})
		if err != nil {
			return err
		}
		return store.Add(ctx, postgres.SQL(sqlTx), e)
	})
}
