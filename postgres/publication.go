package postgres

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/jackc/pgx/v5"
)

// publicationName names the publication of one outbox table's inserts,
// which migration 7 creates and the WAL wake-up streams: publications
// belong to the database, not to a schema, so the name carries both,
// "outboxkit.<schema>.<table>". A dot cannot occur in a validated
// identifier, so two tables never share a name; a name too long for an
// identifier is hashed instead. Migration 7 computes the same name in SQL:
// the two must agree.
func publicationName(schema, table string) string {
	qualified := schema + "." + table
	if name := "outboxkit." + qualified; len(name) <= maxIdentifierBytes {
		return name
	}
	sum := sha256.Sum256([]byte(qualified))
	return "outboxkit_" + hex.EncodeToString(sum[:12])
}

// createPublicationSQL is what an operator runs, as the table's owner, to
// create the publication by hand (migration 7 creates it when the
// migrating role may), on a server of the given version (server_version_num):
// column lists, which keep the stream to the id, need PostgreSQL 15.
func createPublicationSQL(n names, serverVersion int) string {
	columns := ""
	if serverVersion >= 150000 {
		columns = " (id)"
	}
	return "CREATE PUBLICATION " + pgx.Identifier{publicationName(n.schema, n.table)}.Sanitize() +
		" FOR TABLE " + n.outbox + columns + " WITH (publish = 'insert')"
}
