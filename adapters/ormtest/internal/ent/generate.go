// Package ent is the ent client of the tests' business rows, generated
// from ./schema with the sql/execquery feature: it gives *ent.Tx the
// ExecContext and QueryContext methods that make it a
// postgres.SQLQuerier. Regenerate with go generate after editing ./schema.
package ent

//go:generate go run entgo.io/ent/cmd/ent@v0.14.5 generate --feature sql/execquery ./schema
