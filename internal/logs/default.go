package logs

import (
	"context"
	"log/slog"
)

// DefaultLevel is the least severe level the default logger passes on.
const DefaultLevel = slog.LevelWarn

// OrDefault returns l, or when l is nil a logger that writes through
// slog.Default()'s handler at DefaultLevel and above. The handler is looked
// up on every record, so a program that calls slog.SetDefault after building
// a component still gets its lines where it wants them.
func OrDefault(l *slog.Logger) *slog.Logger {
	if l != nil {
		return l
	}
	return slog.New(minLevel{min: DefaultLevel})
}

// minLevel forwards records at or above min to slog.Default()'s handler.
type minLevel struct {
	min   slog.Level
	attrs []slog.Attr
	group string
}

func (h minLevel) target() slog.Handler {
	t := slog.Default().Handler()
	if h.group != "" {
		t = t.WithGroup(h.group)
	}
	if len(h.attrs) > 0 {
		t = t.WithAttrs(h.attrs)
	}
	return t
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && slog.Default().Handler().Enabled(ctx, l)
}

func (h minLevel) Handle(ctx context.Context, r slog.Record) error {
	return h.target().Handle(ctx, r)
}

func (h minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	if h.group != "" {
		// Attributes added after a group belong inside it; keep the order by
		// resolving through the real handler from here on.
		return fixed{min: h.min, h: h.target().WithAttrs(as)}
	}
	n := h
	n.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return n
}

func (h minLevel) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	if h.group != "" {
		return fixed{min: h.min, h: h.target().WithGroup(name)}
	}
	n := h
	n.group = name
	return n
}

// fixed is minLevel once a nested group or attributes inside a group made it
// simpler to bind to the handler in force at that moment.
type fixed struct {
	min slog.Level
	h   slog.Handler
}

func (f fixed) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= f.min && f.h.Enabled(ctx, l)
}
func (f fixed) Handle(ctx context.Context, r slog.Record) error { return f.h.Handle(ctx, r) }
func (f fixed) WithAttrs(as []slog.Attr) slog.Handler {
	return fixed{min: f.min, h: f.h.WithAttrs(as)}
}
func (f fixed) WithGroup(name string) slog.Handler { return fixed{min: f.min, h: f.h.WithGroup(name)} }
