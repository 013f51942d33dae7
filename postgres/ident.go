package postgres

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Identifier limits. PostgreSQL truncates identifiers longer than 63 bytes
// (NAMEDATALEN-1) with only a NOTICE, which would make two long names collide
// silently, so longer names are refused instead.
const (
	maxIdentifierBytes = 63
	// maxTableBytes leaves room for the suffixes of the names derived from the
	// outbox table (the longest today is "_processed_at_idx", 17 bytes; the
	// rest is headroom for future migrations).
	maxTableBytes = 40
)

// Defaults shared by every config in this package.
const (
	// DefaultSchema is the schema used when none is configured.
	DefaultSchema = "public"
	// DefaultTable is the outbox table's name when none is configured.
	DefaultTable = "outbox_events"
)

// validateIdentifier checks that name is a plain SQL identifier: letters,
// digits and underscores, not starting with a digit, at most maxBytes bytes.
// Names are still quoted everywhere; the check exists so that what the
// database creates is exactly what an operator would type, and so that a
// configuration value can never carry SQL.
func validateIdentifier(what, name string, maxBytes int) error {
	if name == "" {
		return &IdentifierError{What: what, Name: name, Reason: "it is empty: use letters, digits and underscores"}
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9':
			if i == 0 {
				return &IdentifierError{What: what, Name: name, Reason: "it starts with a digit: start with a letter or an underscore"}
			}
		default:
			return &IdentifierError{What: what, Name: name, Reason: "use letters, digits and underscores"}
		}
	}
	if len(name) > maxBytes {
		return &IdentifierError{What: what, Name: name, Reason: "it is " + strconv.Itoa(len(name)) + " bytes long; the limit is " + strconv.Itoa(maxBytes)}
	}
	return nil
}

// names holds every identifier the package's SQL uses for one (schema,
// table), validated and quoted once. Nothing else is ever spliced into SQL
// text.
type names struct {
	schema string // raw, validated
	table  string // raw, validated

	schemaQ    string // "schema"
	outbox     string // "schema"."table"
	aggregates string // "schema"."table_aggregates"
	processed  string // "schema"."table_processed"
	versions   string // "schema"."outboxkit_migrations"
	claimSlot  string // "schema"."table_claim_slot", the sequence of slot claims

	// Unqualified index names (CREATE INDEX puts them in the table's schema).
	pendingIdx   string
	publishedIdx string
	deadIdx      string
	aggregateIdx string
	processedIdx string
	slotIdx      string

	// Unqualified constraint names.
	attemptsCheck string

	// Consumer-side order (Sequencer, migration 008).
	sequences      string // "schema"."table_sequences"
	sequenceGaps   string // "schema"."table_sequence_gaps"
	sequenceParked string // "schema"."table_sequence_parked"
}

func newNames(schema, table string) (names, error) {
	if err := validateIdentifier("schema name", schema, maxIdentifierBytes); err != nil {
		return names{}, err
	}
	if err := validateIdentifier("table name", table, maxTableBytes); err != nil {
		return names{}, err
	}
	q := func(parts ...string) string { return pgx.Identifier(parts).Sanitize() }
	return names{
		schema:       schema,
		table:        table,
		schemaQ:      q(schema),
		outbox:       q(schema, table),
		aggregates:   q(schema, table+"_aggregates"),
		processed:    q(schema, table+"_processed"),
		versions:     q(schema, "outboxkit_migrations"),
		claimSlot:    q(schema, table+"_claim_slot"),
		pendingIdx:   q(table + "_pending_idx"),
		publishedIdx: q(table + "_published_idx"),
		deadIdx:      q(table + "_dead_idx"),
		aggregateIdx: q(table + "_aggregate_idx"),
		processedIdx: q(table + "_processed_at_idx"),
		slotIdx:      q(table + "_slot_idx"),

		attemptsCheck: q(table + "_attempts_check"),

		sequences:      q(schema, table+"_sequences"),
		sequenceGaps:   q(schema, table+"_sequence_gaps"),
		sequenceParked: q(schema, table+"_sequence_parked"),
	}, nil
}

// defaultChannel names the NOTIFY channel of one outbox table: its qualified
// name, so tenants sharing a database do not wake each other's relays. A dot
// cannot occur in a validated identifier, so two (schema, table) pairs never
// share a channel; a name too long for a channel is hashed instead.
func defaultChannel(schema, table string) string {
	ch := schema + "." + table
	if len(ch) <= maxIdentifierBytes {
		return ch
	}
	sum := sha256.Sum256([]byte(ch))
	return "outboxkit_" + hex.EncodeToString(sum[:12])
}

// validateChannel accepts any channel name PostgreSQL can LISTEN on once
// quoted; LISTEN quotes it with pgx.Identifier and pg_notify takes it as a
// parameter, so it needs no stricter rule.
func validateChannel(ch string) error {
	if ch == "" || len(ch) > maxIdentifierBytes || strings.ContainsRune(ch, 0) {
		return &IdentifierError{What: "channel name", Name: ch, Reason: "use 1 to 63 bytes without NUL"}
	}
	return nil
}

// quoteLiteral quotes s as a SQL string literal. It is only used for the
// printed migration script, and only on validated identifiers, but it quotes
// properly anyway.
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
