//go:build race

package main

// raceEnabled says the tests run with -race, so the binary is built with it.
const raceEnabled = true
