package logs

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestOrDefaultKeepsAGivenLogger(t *testing.T) {
	l := slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))
	if OrDefault(l) != l {
		t.Fatal("OrDefault replaced a non-nil logger")
	}
}

func TestOrDefaultWritesWarningsThroughSlogDefault(t *testing.T) {
	var buf bytes.Buffer
	prev := slog.Default()
	t.Cleanup(func() { slog.SetDefault(prev) })

	l := OrDefault(nil).With("component", "relay")
	// Set after building: the default is looked up per record.
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))

	l.Info("quiet")
	l.Warn("loud", "n", 1)
	l.WithGroup("g").Error("grouped", "k", "v")

	out := buf.String()
	if strings.Contains(out, "quiet") {
		t.Errorf("info passed the default filter:\n%s", out)
	}
	if !strings.Contains(out, "msg=loud") || !strings.Contains(out, "component=relay") {
		t.Errorf("warning missing or without its attributes:\n%s", out)
	}
	if !strings.Contains(out, "g.k=v") {
		t.Errorf("group lost:\n%s", out)
	}
}
