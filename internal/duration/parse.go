package duration

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Day is the unit "d": exactly 24 hours, whatever the calendar does.
const Day = 24 * time.Hour

// Max is the longest duration Parse returns: the largest time.Duration.
const Max = time.Duration(math.MaxInt64)

var (
	// ErrSyntax is matched by a string that is not a duration.
	ErrSyntax = errors.New("not a duration")
	// ErrOutOfRange is matched by a duration longer than Max.
	ErrOutOfRange = errors.New("duration out of range")
	// ErrNegative is matched by a duration below zero.
	ErrNegative = errors.New("negative duration")
)

// Error is a duration that could not be parsed: Input as given, and Err,
// one of ErrSyntax, ErrOutOfRange or ErrNegative.
type Error struct {
	Input string
	Err   error
}

func (e *Error) Error() string { return fmt.Sprintf("%q is %s", e.Input, e.Reason()) }

// Reason is the error without the input, for messages that quote the input
// already (the flag package's "invalid value %q for flag").
func (e *Error) Reason() string {
	switch e.Err {
	case ErrOutOfRange:
		return "out of range: the longest duration is " + Format(Max) + " (about 292 years)"
	case ErrNegative:
		return "negative: use zero or more"
	}
	return "not a duration: use a form such as 90s, 15m, 36h, 7d or 1d12h"
}

func (e *Error) Unwrap() error { return e.Err }

// Parse reads a duration: a Go duration optionally preceded by whole days
// ("90s", "36h", "7d", "1d12h30m"). Surrounding spaces are ignored. A sign
// may only lead the whole value ("-1h" is negative, "1d-1h" is not a
// duration). The result is never negative and never wraps around: values
// over Max fail with ErrOutOfRange, below zero with ErrNegative.
func Parse(s string) (time.Duration, error) {
	in := s
	s = strings.TrimSpace(s)
	neg := false
	if s != "" && (s[0] == '-' || s[0] == '+') {
		neg = s[0] == '-'
		s = s[1:]
	}
	d, err := parseMagnitude(s)
	switch {
	case err == ErrOutOfRange && neg:
		return 0, &Error{Input: in, Err: ErrNegative}
	case err != nil:
		return 0, &Error{Input: in, Err: err}
	case neg && d != 0:
		return 0, &Error{Input: in, Err: ErrNegative}
	}
	return d, nil
}

// ParseOrSeconds is Parse that also reads a bare integer as a number of
// seconds ("30" is 30s), as HTTP headers such as Upstash-Delay write them.
func ParseOrSeconds(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	neg := strings.HasPrefix(t, "-")
	digits := strings.TrimLeft(t, "+-")
	if len(t)-len(digits) > 1 || !isDigits(digits) {
		return Parse(s)
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	switch {
	case neg && strings.Trim(digits, "0") != "":
		return 0, &Error{Input: s, Err: ErrNegative}
	case err != nil || n > uint64(Max/time.Second):
		return 0, &Error{Input: s, Err: ErrOutOfRange}
	}
	return time.Duration(n) * time.Second, nil
}

// parseMagnitude parses an unsigned "[<days>d]<go duration>".
func parseMagnitude(s string) (time.Duration, error) {
	var days time.Duration
	if i := strings.IndexByte(s, 'd'); i >= 0 {
		// Go's units (ns, us, µs, ms, s, m, h) have no "d", so the first
		// one ends the day count.
		if i == 0 || !isDigits(s[:i]) {
			return 0, ErrSyntax
		}
		n, err := strconv.ParseUint(s[:i], 10, 64)
		if err != nil || n > uint64(Max/Day) {
			// Only a digit string too long for uint64 fails here.
			return 0, ErrOutOfRange
		}
		days = time.Duration(n) * Day
		s = s[i+1:]
		if s == "" {
			return days, nil
		}
		if s[0] == '-' || s[0] == '+' {
			return 0, ErrSyntax
		}
	}
	if s == "" || s[0] == '-' || s[0] == '+' {
		return 0, ErrSyntax
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		// time.ParseDuration refuses overflow with the same error as bad
		// syntax; a well-formed number with a unit that is too large is
		// the overflow.
		if wellFormedOverflow(s) {
			return 0, ErrOutOfRange
		}
		return 0, ErrSyntax
	}
	if d > Max-days {
		return 0, ErrOutOfRange
	}
	return days + d, nil
}

// wellFormedOverflow reports whether s, which time.ParseDuration refused, is
// made of number–unit pairs with known units, so that its only fault can be
// its size.
func wellFormedOverflow(s string) bool {
	if s == "0" {
		return false
	}
	for s != "" {
		i := 0
		for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
			i++
		}
		num := s[:i]
		if num == "" || num == "." || strings.Count(num, ".") > 1 {
			return false
		}
		s = s[i:]
		j := 0
		for j < len(s) && !(s[j] >= '0' && s[j] <= '9' || s[j] == '.') {
			j++
		}
		switch s[:j] {
		case "ns", "us", "µs", "μs", "ms", "s", "m", "h":
		default:
			return false
		}
		s = s[j:]
	}
	return true
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
