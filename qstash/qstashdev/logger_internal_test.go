package qstashdev

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestDefaultLoggerWritesWarnings: a server built without a Logger reports
// its errors through slog.Default() instead of discarding them.
func TestDefaultLoggerWritesWarnings(t *testing.T) {
	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })

	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	s.log.Warn("listener failed")
	if !strings.Contains(buf.String(), "listener failed") {
		t.Fatalf("the default logger discarded a warning; slog.Default got %q", buf.String())
	}
}
