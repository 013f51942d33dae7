package main

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// logFlags are the logging flags of long-running commands.
type logFlags struct {
	format string
	level  string
}

func (l *logFlags) register(fs *flagSet) {
	fs.StringVar(&l.format, "log-format", "text", "log `format`: text or json (one JSON object per line, for log shippers)")
	fs.StringVar(&l.level, "log-level", "info", "lowest `level` logged: debug, info, warn or error (the relay logs every batch at debug)")
}

// logger returns the slog logger the flags describe, writing to w (stderr:
// stdout is for a command's output).
func (l *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.level)); err != nil {
		return nil, usageError(fmt.Sprintf("--log-level %q: use debug, info, warn or error", l.level))
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(l.format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usageError(fmt.Sprintf("--log-format %q: use text or json", l.format))
}
