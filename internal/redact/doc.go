// Package redact removes credentials from text before outboxkit prints it:
// command-line errors and logs (outboxctl), test failures (internal/pgtest).
//
// String is the one function. It removes the secrets its caller knows
// (passwords and tokens it was given, found in their connection strings by
// Secrets) wherever they appear, and then whatever looks like a credential:
//
//   - the userinfo of a URL: postgres://app:***@db, nats://***@host for the
//     NATS token form, and the whole userinfo, user included, when it holds
//     characters a URL cannot (an unescaped "@", "/" or space), so the URL
//     does not parse and no one can say where its password ends;
//   - password=... in keyword/value connection strings, quoted or not;
//   - password, token and secret query parameters;
//   - bearer tokens.
//
// It errs on the side of removing too much: a hostile password ends the
// userinfo at the last "@" before the next URL, so text between them may be
// lost, and a leaked password may not be.
package redact
