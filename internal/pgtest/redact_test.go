package pgtest

import (
	"strings"
	"testing"
)

// TestRedact: a failure message names the server it could not reach
// without its password, even one a URL cannot hold unescaped.
func TestRedact(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ url, secret string }{
		{"postgres://app:hunter2@db:5432/test", "hunter2"},
		{"postgres://app:p@ss@db:5432/test", "ss"},
		{"postgres://app:pa/ss@db:5432/test", "pa/ss"},
		{"postgres://app:pa ss@db:5432/test", "pa ss"},
		{"host=db user=app password='p w' dbname=test", "p w"},
		{"host=db user=app password=hunter2 dbname=test", "hunter2"},
	} {
		if got := redact(tc.url); strings.Contains(got, tc.secret) || !strings.Contains(got, "db") {
			t.Errorf("redact(%q) = %q", tc.url, got)
		}
	}
	if got := redact(DefaultURL); got != DefaultURL {
		t.Errorf("redact(%q) = %q: nothing to hide", DefaultURL, got)
	}
}
