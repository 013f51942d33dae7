package postgres

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// walUnavailableError says why this server or role cannot stream the WAL
// wake-up, and what would make it possible. Listen then falls back to
// LISTEN (wakeup.go): these are settings, which retrying will not change,
// unlike a lost connection.
type walUnavailableError struct {
	Reason string // what is missing
	Fix    string // what an operator can do
	Err    error  // the server's error, when it said so itself
}

func (e *walUnavailableError) Error() string {
	return "WAL wake-ups unavailable: " + e.Reason + ": " + e.Fix
}

func (e *walUnavailableError) Unwrap() error { return e.Err }

// classifyStreamError turns the server's refusals that a retry cannot
// cure into a *walUnavailableError; anything else (a lost or refused
// connection, a timeout) is returned as it is, and Listen retries the
// stream after its backoff.
func classifyStreamError(n names, user string, version int, err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return err
	}
	un := &walUnavailableError{Reason: pe.Message, Err: err}
	switch {
	case pe.Code == "42501": // insufficient_privilege: "must be superuser or replication role to start walsender"
		un.Reason = "role " + pgx.Identifier{user}.Sanitize() + " may not replicate (" + pe.Message + ")"
		un.Fix = "run ALTER ROLE " + pgx.Identifier{user}.Sanitize() + " REPLICATION, or point Config.WakeupURL at a role that has it"
	case pe.Code == "53300" && strings.Contains(pe.Message, "wal_senders"): // too many WAL senders
		un.Fix = "raise max_wal_senders (and restart PostgreSQL): each relay's stream holds one WAL sender"
	case pe.Code == "53400": // configuration_limit_exceeded: "all replication slots are in use"
		un.Fix = "raise max_replication_slots (and restart PostgreSQL): each relay's stream holds one temporary slot"
	case pe.Code == "55000": // object_not_in_prerequisite_state: wal_level, or a standby
		un.Fix = "logical decoding needs a primary (before PostgreSQL 16) with wal_level = logical: run ALTER SYSTEM SET wal_level = logical and restart PostgreSQL"
	case pe.Code == "42704" && strings.Contains(pe.Message, "publication"): // undefined_object: the publication went away
		un.Fix = "run the migrations as the table's owner with CREATE on the database, or have that role run " + createPublicationSQL(n, version)
	case pe.Code == "28000" || pe.Code == "28P01": // the server refused the connection
		un.Fix = "allow the role a connection to the database in pg_hba.conf (a logical replication connection matches the database's lines, not the replication keyword)"
	case strings.Contains(pe.Message, "unsupported startup parameter"):
		// PgBouncer refuses replication=database.
		un.Reason = "the wake-up connection goes through a pooler that refuses replication connections (" + pe.Message + ")"
		un.Fix = "set Config.WakeupURL to PostgreSQL itself, past PgBouncer"
	default:
		return err
	}
	return un
}

// noteFallback logs that the store falls back from the WAL stream to
// LISTEN: at warn level the first time, with the reason and the fix, then
// at debug level, since each reconnection tries the stream again and
// would otherwise repeat the same advice.
func (s *Store) noteFallback(ctx context.Context, un *walUnavailableError) {
	const msg = "outbox WAL wake-ups unavailable; relays wake by LISTEN (writers that notify) and polling, which speeds up while events flow"
	args := []any{"table", s.n.outbox, "reason", un.Reason, "to_enable", un.Fix}
	if s.wakeups.warned.CompareAndSwap(false, true) {
		s.cfg.Logger.WarnContext(ctx, msg, args...)
		return
	}
	s.cfg.Logger.DebugContext(ctx, msg, args...)
}
