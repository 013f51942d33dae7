//go:build race

package postgres_test

// retentionRace: the tests run with -race, so the process they SIGKILL is
// built with it too.
const retentionRace = true
