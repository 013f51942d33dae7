// Package duration is outboxkit's one parser for human-written durations:
// the command line's retention and alert thresholds (outboxctl) and the
// Upstash-Delay, Upstash-Timeout and flow-control periods that qstashdev
// reads from requests.
//
// The grammar is Go's (time.ParseDuration: "90s", "1h30m", "250ms")
// optionally preceded by a whole number of days, since retention is counted
// in days and Go stops at hours: "7d", "1d12h", "30d0.5h". A day is exactly
// 24 hours. ParseOrSeconds also reads a bare integer as seconds, as QStash's
// headers do.
//
// Every result is between zero and the longest time.Duration
// (106751d23h47m16.854775807s, about 292 years). Anything beyond is
// refused with ErrOutOfRange rather than wrapped around: an earlier copy of
// this parser multiplied the day count unchecked, so "213504d1h" came out as
// 1h25m and a prune meant to keep centuries of events deleted nearly all of
// them. Negative values are refused with ErrNegative: no caller has a use
// for one, and a negative retention would reach into the future.
package duration
