// Package logs holds the one default every outboxkit component uses when its
// Config leaves Logger nil: the process's slog.Default() handler, filtered to
// warnings and errors. Libraries that discard their logs by default hide a
// missing table or an unreachable database; libraries that log at info by
// default flood a service's output. River makes the same choice.
//
// The package imports only the standard library, so core may use it.
package logs
