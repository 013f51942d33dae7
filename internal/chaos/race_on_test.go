//go:build race

package chaos_test

// raceEnabled builds the worker processes with -race too when the test
// binary has it, so their data races fail the run (and the build cache
// entries are the ones `go test -race ./...` already made).
const raceEnabled = true
