package postgres

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outboxkit/core"
)

// last_error holds at most maxErrorBytes of valid UTF-8 without NUL,
// whatever the publisher's error text was: each invalid byte becomes a
// three-byte U+FFFD, so the text must be cleaned before it is cut.
func TestLastErrorIsBoundedAfterCleaning(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 3*maxErrorBytes)
	cases := map[string]string{
		"invalid bytes":           strings.Repeat("\xff", 2*maxErrorBytes),
		"invalid after a prefix":  strings.Repeat("a", maxErrorBytes-10) + strings.Repeat("\xfe", 100),
		"NULs":                    strings.Repeat("\x00", 2*maxErrorBytes) + "tail",
		"NULs and invalid mixed":  strings.Repeat("\x00\xc3", maxErrorBytes),
		"multi-byte at the limit": strings.Repeat("a", maxErrorBytes-1) + "é" + long,
		"four-byte runes":         strings.Repeat("😀", maxErrorBytes),
		"long ASCII":              long,
	}
	s, events := tidTestStore(t, len(cases), Config{Notify: NotifyOff})
	ctx := context.Background()
	b := claimAll(t, s, len(cases))
	var outcomes []core.Outcome
	texts := map[core.ID]string{}
	i := 0
	for name, text := range cases {
		id := events[i].ID
		i++
		texts[id] = name
		outcomes = append(outcomes, core.Outcome{ID: id, Kind: core.Retry, Error: text, Delay: time.Hour})
		got := cleanErrorText(text)
		if len(got) > maxErrorBytes || !utf8.ValidString(got) || strings.ContainsRune(got, 0) {
			t.Errorf("%s: cleanErrorText gives %d bytes (valid UTF-8 %v, NUL %v), want at most %d of valid UTF-8 without NUL",
				name, len(got), utf8.ValidString(got), strings.ContainsRune(got, 0), maxErrorBytes)
		}
	}
	if err := s.Settle(ctx, core.SettleRequest{Lease: b.Lease, Outcomes: outcomes}); err != nil {
		t.Fatalf("settle: %v", err)
	}
	rows, err := s.pool.Query(ctx, "SELECT id, octet_length(last_error), last_error FROM "+s.n.outbox)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var id pgtype.UUID
		var n int
		var text string
		if err := rows.Scan(&id, &n, &text); err != nil {
			t.Fatal(err)
		}
		seen++
		name := texts[id.Bytes]
		if n > maxErrorBytes || n == 0 {
			t.Errorf("%s: last_error holds %d bytes, want 1 to %d", name, n, maxErrorBytes)
		}
		if name == "multi-byte at the limit" && text != strings.Repeat("a", maxErrorBytes-1) {
			t.Errorf("%s: the cut split or kept the rune that crosses the limit: ends %q", name, text[len(text)-4:])
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if seen != len(cases) {
		t.Fatalf("read %d rows, want %d", seen, len(cases))
	}
}
