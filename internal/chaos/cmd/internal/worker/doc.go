// Package worker holds what the chaos suite's worker processes
// (cmd/chaosrelay, cmd/chaosconsumer) share: the database flags, a pool
// whose every connection carries the process's application_name, so the
// suite can find and terminate them, and a main that stops on SIGTERM.
package worker
