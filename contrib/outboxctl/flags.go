package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/outboxkit/internal/duration"
)

// flagSet is a flag.FlagSet with the text its --help prints.
type flagSet struct {
	*flag.FlagSet
	// synopsis follows "outboxctl <name>" on the usage line.
	synopsis string
	// help is the command's description.
	help string
}

// newFlagSet returns a flag set for the command called name ("" for the
// top level, "dlq list" for a nested one) that never prints or exits by
// itself: parse turns its errors into one-line messages.
func (a *app) newFlagSet(name, synopsis, help string) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, synopsis: synopsis, help: help}
}

// parse parses args and returns the positional arguments left. --help
// prints the usage and returns errHelpShown; a bad flag returns a one-line
// usage error that says where to look.
func (a *app) parse(fs *flagSet, args []string) ([]string, error) {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		a.usage(fs)
		return nil, errHelpShown
	}
	if err != nil {
		return nil, usageError(fmt.Sprintf("%s — see %s --help", doubleDash(err.Error()), cmdPath(fs)))
	}
	return fs.Args(), nil
}

// parseFlags parses args for a command that takes flags only.
func (a *app) parseFlags(fs *flagSet, args []string) error {
	rest, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	return noArgs(fs, rest)
}

// noArgs refuses positional arguments for commands that take none, so a
// forgotten "--" (outboxctl replay id=...) is not silently ignored.
func noArgs(fs *flagSet, rest []string) error {
	if len(rest) > 0 {
		return usageError(fmt.Sprintf("unexpected argument %q: %s takes only flags (see %s --help)", rest[0], cmdPath(fs), cmdPath(fs)))
	}
	return nil
}

// flagGiven reports whether the flag called name was on the command line,
// which tells an explicit zero from the default.
func flagGiven(fs *flagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

func cmdPath(fs *flagSet) string {
	if fs.Name() == "" {
		return "outboxctl"
	}
	return "outboxctl " + fs.Name()
}

// flagNameRE finds "-name" in the flag package's messages, which outboxctl
// documents as "--name" (the flag package accepts both).
var flagNameRE = regexp.MustCompile(`(^|[\s"])-([a-z][a-z0-9-]*)`)

func doubleDash(s string) string { return flagNameRE.ReplaceAllString(s, "${1}--${2}") }

// usage prints fs's help to stdout: help was asked for, so it is the output.
func (a *app) usage(fs *flagSet) {
	w := a.stdout
	fmt.Fprintf(w, "Usage: %s %s\n\n", cmdPath(fs), fs.synopsis)
	if fs.help != "" {
		fmt.Fprintf(w, "%s\n\n", fs.help)
	}
	fmt.Fprintln(w, "Flags:")
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		if t, ok := f.Value.(interface{ Type() string }); ok && !strings.Contains(f.Usage, "`") {
			name = t.Type()
		}
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
		}
		fmt.Fprintln(w, line)
		def := f.DefValue
		switch {
		case isSecretFlag(f.Name) && def != "":
			def = "(set)"
		case isURLFlag(f.Name):
			def = displayURL(def)
		}
		if def != "" && def != "false" && def != "0" && def != "-1" && def != "[]" {
			usage += fmt.Sprintf(" (default %s)", def)
		}
		fmt.Fprintf(w, "      %s\n", usage)
	})
}

func isSecretFlag(name string) bool { return strings.Contains(name, "token") }
func isURLFlag(name string) bool    { return strings.HasSuffix(name, "-url") }

// envOr returns the environment variable key, or def when it is unset or
// empty.
func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}

// listFlag is a repeatable flag whose values may also be comma-separated:
// --id a --id b,c collects a, b and c.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

// Type names the value in --help.
func (*listFlag) Type() string { return "list" }

func (l *listFlag) Set(s string) error {
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

// durationFlag is a time.Duration flag that also accepts days ("7d",
// "1d12h"), since retention and alert thresholds are usually counted in
// days and time.ParseDuration stops at hours. internal/duration parses it,
// refusing negative values and values too long to represent.
type durationFlag struct{ d *time.Duration }

func newDurationFlag(fs *flagSet, p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	fs.Var(durationFlag{d: p}, name, usage)
}

func (f durationFlag) String() string {
	if f.d == nil || *f.d == 0 {
		return "0"
	}
	return formatDuration(*f.d)
}

func (f durationFlag) Set(s string) error {
	d, err := duration.Parse(s)
	if de := (*duration.Error)(nil); errors.As(err, &de) {
		// The flag package quotes the value already.
		return errors.New(de.Reason())
	}
	if err != nil {
		return err
	}
	*f.d = d
	return nil
}

// Type names the value in --help.
func (durationFlag) Type() string { return "duration" }

// formatDuration prints d rounded for humans: whole days as "Nd", otherwise
// Go's format rounded to what matters at that scale.
func formatDuration(d time.Duration) string {
	switch {
	case d >= 24*time.Hour && d%(24*time.Hour) == 0:
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	case d >= time.Minute:
		// "2h0m0s" reads better as "2h", "1h30m0s" as "1h30m".
		s := d.Round(time.Second).String()
		s = strings.TrimSuffix(s, "0s")
		if strings.HasSuffix(s, "h0m") {
			s = strings.TrimSuffix(s, "0m")
		}
		return s
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	default:
		return d.Round(time.Microsecond).String()
	}
}

// parseTime reads an RFC 3339 time for --since and --until.
func parseTime(flagName, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, usageError(fmt.Sprintf("--%s %q is not an RFC 3339 time such as 2025-01-31T14:00:00Z", flagName, s))
	}
	return t, nil
}
