package postgres

import (
	"strings"
	"unicode/utf8"
)

// Error text: what a publish error becomes before last_error stores it.

// maxErrorBytes bounds the publish error text kept in last_error: a
// transport may return a whole HTTP body, and every retry rewrites the row.
const maxErrorBytes = 4096

// cleanErrorText makes a publish error storable in a text column: valid
// UTF-8 without NUL, then at most maxErrorBytes, cut at a rune boundary.
// Cleaning comes first because it changes the length: an invalid byte
// becomes a three-byte U+FFFD, and a NUL disappears.
func cleanErrorText(s string) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
	if len(s) > maxErrorBytes {
		cut := maxErrorBytes
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}
