// Package schema is the ent schema of the tests' business rows, the
// tables ormsuite creates.
package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/field"
)

// Order is a row of orders.
type Order struct{ ent.Schema }

// Fields of Order.
func (Order) Fields() []ent.Field {
	return []ent.Field{
		field.String("id"),
		field.Int64("total"),
	}
}

// Invoice is a row of invoices: id is the ID of the event that made it.
type Invoice struct{ ent.Schema }

// Fields of Invoice.
func (Invoice) Fields() []ent.Field {
	return []ent.Field{
		field.String("id"),
		field.String("order_id"),
		field.Int64("cents"),
	}
}
