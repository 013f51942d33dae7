package main

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/outboxkit/outboxkit/internal/redact"
)

// logFlags are the logging flags of long-running commands.
type logFlags struct {
	format string
	level  string
	// redact filters every logged string and error; nil means
	// redact.String, which knows no particular secret. Commands that know
	// some (the relay's passwords and tokens) set it to app.redact.
	redact func(string) string
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
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: l.redactAttr}
	switch strings.ToLower(l.format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usageError(fmt.Sprintf("--log-format %q: use text or json", l.format))
}

// redactAttr removes credentials from a log attribute: libraries log
// errors that quote connection strings (a broker URL, a DSN). It runs
// before the handler encodes the value, so the JSON format stays valid.
func (l *logFlags) redactAttr(_ []string, at slog.Attr) slog.Attr {
	f := l.redact
	if f == nil {
		f = func(s string) string { return redact.String(s) }
	}
	switch v := at.Value; v.Kind() {
	case slog.KindString:
		at.Value = slog.StringValue(f(v.String()))
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			at.Value = slog.StringValue(f(err.Error()))
		}
	}
	return at
}
