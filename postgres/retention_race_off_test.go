//go:build !race

package postgres_test

// retentionRace: see retention_race_on_test.go.
const retentionRace = false
