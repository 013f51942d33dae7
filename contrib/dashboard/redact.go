package dashboard

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
)

// redacted replaces a secret wherever the dashboard would show it.
const redacted = "[redacted]"

var (
	// urlUserinfo is the user:password@ of a URL.
	urlUserinfo = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@`)
	// secretParam is a query parameter or key=value pair that usually
	// holds a credential.
	secretParam = regexp.MustCompile(`(?i)\b((?:access_|api_|auth_)?(?:token|key|secret|password|passwd|signature|sig|apikey|api-key|credential)s?=)[^&\s"']+`)
	// bearerValue is an Authorization header's credential quoted in an
	// error.
	bearerValue = regexp.MustCompile(`(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}`)
)

// redactText hides URL credentials, secret-looking parameters and bearer
// tokens in free text (last errors, destinations): publishers quote the
// URL they failed to reach, and a URL may carry a password or a token.
func redactText(s string) string {
	s = urlUserinfo.ReplaceAllString(s, "${1}"+redacted+"@")
	s = secretParam.ReplaceAllString(s, "${1}"+redacted)
	s = bearerValue.ReplaceAllString(s, "${1} "+redacted)
	return s
}

// headerRow is one event header as the event page shows it.
type headerRow struct {
	Name, Value string
	Redacted    bool
}

var (
	// Patterns that make one error text of many: what differs between
	// occurrences of the same failure (IDs, numbers, addresses, quoted
	// values) becomes a placeholder.
	normUUID   = regexp.MustCompile(`(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`)
	normHex    = regexp.MustCompile(`(?i)\b(?:0x)?[0-9a-f]*[0-9][0-9a-f]*[a-f][0-9a-f]*\b|\b(?:0x)?[0-9a-f]*[a-f][0-9a-f]*[0-9][0-9a-f]*\b`)
	normIP     = regexp.MustCompile(`\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b`)
	normQuoted = regexp.MustCompile(`"[^"]*"|'[^']*'`)
	normTime   = regexp.MustCompile(`\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?`)
	normNumber = regexp.MustCompile(`\b\d+(?:\.\d+)?(?:ms|µs|us|ns|s|m|h)?\b`)
	normSpace  = regexp.MustCompile(`\s+`)
)

// normaliseError turns an error text into its group's text: the same
// failure with another event ID, status code detail, address, duration
// or quoted value normalises to the same string. The text is redacted
// first, so a group never shows a credential either.
func normaliseError(s string) string {
	s = redactText(s)
	s = normTime.ReplaceAllString(s, "<time>")
	s = normUUID.ReplaceAllString(s, "<id>")
	s = normIP.ReplaceAllString(s, "<addr>")
	s = normQuoted.ReplaceAllString(s, "<value>")
	s = normHex.ReplaceAllStringFunc(s, func(m string) string {
		// Hex words of 8 digits or more are IDs; shorter ones are words
		// ("dead", "face") as often as not.
		if len(strings.TrimPrefix(strings.ToLower(m), "0x")) >= 8 {
			return "<hex>"
		}
		return m
	})
	s = normNumber.ReplaceAllString(s, "<n>")
	s = strings.TrimSpace(normSpace.ReplaceAllString(s, " "))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	if s == "" {
		s = "(no error recorded)"
	}
	return s
}

// groupKey identifies a dead-letter group (type and normalised error) in
// URLs and forms.
func groupKey(eventType, normError string) string {
	sum := sha256.Sum256([]byte(eventType + "\x00" + normError))
	return hex.EncodeToString(sum[:12])
}
