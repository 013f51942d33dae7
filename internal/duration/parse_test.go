package duration

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"90s", 90 * time.Second},
		{"15m", 15 * time.Minute},
		{"36h", 36 * time.Hour},
		{"250ms", 250 * time.Millisecond},
		{"1.5h", 90 * time.Minute},
		{"0", 0},
		{"0s", 0},
		{"-0s", 0},
		{"+1h", time.Hour},
		{"7d", 7 * Day},
		{"0d", 0},
		{"1d12h", 36 * time.Hour},
		{"1d10h30m", 34*time.Hour + 30*time.Minute},
		{"2d0.5h", 48*time.Hour + 30*time.Minute},
		{"  7d  ", 7 * Day},
		{"007d", 7 * Day},
		// The longest values: every day count up to the last whole day,
		// and the exact maximum in either spelling.
		{"106751d", 106751 * Day},
		{"106751d23h47m16.854775807s", Max},
		{"9223372036854775807ns", Max},
		{"2562047h47m16.854775807s", Max},
	} {
		got, err := Parse(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want error
	}{
		{"", ErrSyntax},
		{"  ", ErrSyntax},
		{"d", ErrSyntax},
		{"xd", ErrSyntax},
		{"1.5d", ErrSyntax},
		{"7 days", ErrSyntax},
		{"7", ErrSyntax}, // a bare number has no unit: days? seconds? say so
		{"12h1d", ErrSyntax},
		{"1d1d", ErrSyntax},
		{"1d-1h", ErrSyntax},
		{"1d+1h", ErrSyntax},
		{"+-1h", ErrSyntax},
		{"--1h", ErrSyntax},
		{"d5h", ErrSyntax},
		{"1x", ErrSyntax},
		{"ten", ErrSyntax},
		// Overflow: these used to wrap around. 213504 days times 24h in
		// nanoseconds is 2^64 plus a little, so "213504d1h" came out as
		// 1h25m; 106752d is past the maximum and came out negative.
		{"213504d1h", ErrOutOfRange},
		{"213504d", ErrOutOfRange},
		{"106752d", ErrOutOfRange},
		{"106751d24h", ErrOutOfRange},
		{"106751d23h47m16.854775808s", ErrOutOfRange},
		{"9223372036854775808ns", ErrOutOfRange},
		{"2562048h", ErrOutOfRange},
		{"99999999999999999999999d", ErrOutOfRange},
		{"1d9223372036854775807ns", ErrOutOfRange},
		// Negative values, including ones too long to represent.
		{"-1h", ErrNegative},
		{"-1ns", ErrNegative},
		{"-7d", ErrNegative},
		{"-1d12h", ErrNegative},
		{"-213504d", ErrNegative},
		{"-9223372036854775808ns", ErrNegative},
	} {
		got, err := Parse(tc.in)
		if !errors.Is(err, tc.want) {
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			continue
		}
		var de *Error
		if !errors.As(err, &de) || de.Input != tc.in || !strings.Contains(err.Error(), `"`+tc.in+`"`) {
			t.Errorf("Parse(%q): error %v does not quote the input", tc.in, err)
		}
	}
}

func TestErrorSaysWhatToDo(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"213504d1h": `"213504d1h" is out of range: the longest duration is 106751d23h47m16.854775807s`,
		"-1h":       `"-1h" is negative: use zero or more`,
		"7 days":    `"7 days" is not a duration: use a form such as 90s, 15m, 36h, 7d`,
	} {
		if _, err := Parse(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) error %v, want it to contain %q", in, err, want)
		}
	}
}

func TestParseOrSeconds(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{
		"90": 90 * time.Second, "0": 0, "-0": 0, "+5": 5 * time.Second, " 30 ": 30 * time.Second,
		"9223372036": 9223372036 * time.Second,
		"10s":        10 * time.Second, "1d10h30m": 34*time.Hour + 30*time.Minute,
	} {
		if got, err := ParseOrSeconds(in); err != nil || got != want {
			t.Errorf("ParseOrSeconds(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for in, want := range map[string]error{
		"-1": ErrNegative, "-99999999999999999999999": ErrNegative,
		"9223372037": ErrOutOfRange, "99999999999999999999999": ErrOutOfRange,
		"": ErrSyntax, "+-1": ErrSyntax, "1d-1h": ErrSyntax, "213504d1h": ErrOutOfRange,
	} {
		if got, err := ParseOrSeconds(in); !errors.Is(err, want) {
			t.Errorf("ParseOrSeconds(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
}

func TestFormatRoundTrips(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0: "0s", 90 * time.Second: "1m30s", 7 * Day: "7d", 36 * time.Hour: "1d12h0m0s",
		Day - 1: "23h59m59.999999999s", Max: "106751d23h47m16.854775807s",
	} {
		if got := Format(d); got != want {
			t.Errorf("Format(%d) = %q, want %q", d, got, want)
		}
		if back, err := Parse(Format(d)); err != nil || back != d {
			t.Errorf("Parse(Format(%d)) = %v, %v", d, back, err)
		}
	}
}

// FuzzParse checks what must hold for every input: a result is within
// [0, Max]; it formats and parses back to itself; and where the input has
// no day unit, Parse agrees with time.ParseDuration on every value that is
// not negative.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"90s", "7d", "1d12h", "213504d1h", "106752d", "-1h", "1d-1h", "0", ".5s", "1.5d", "106751d23h47m16.854775807s", "9223372036854775808ns"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrOutOfRange) && !errors.Is(err, ErrNegative) {
				t.Fatalf("Parse(%q): unclassified error %v", s, err)
			}
		} else {
			if d < 0 {
				t.Fatalf("Parse(%q) = %v, negative", s, d)
			}
			if back, err := Parse(Format(d)); err != nil || back != d {
				t.Fatalf("Parse(Format(Parse(%q))) = %v, %v; want %v", s, back, err, d)
			}
		}
		if strings.ContainsRune(s, 'd') {
			return
		}
		if gd, gerr := time.ParseDuration(strings.TrimSpace(s)); gerr == nil && gd >= 0 && (err != nil || d != gd) {
			t.Fatalf("Parse(%q) = %v, %v; time.ParseDuration says %v", s, d, err, gd)
		}
	})
}

// FuzzFormat round-trips every representable duration.
func FuzzFormat(f *testing.F) {
	for _, n := range []int64{0, 1, int64(Day), int64(Day) - 1, int64(Max), int64(Max) - int64(Day)} {
		f.Add(n)
	}
	f.Fuzz(func(t *testing.T, n int64) {
		d := time.Duration(n)
		if d < 0 {
			d = -(d + 1) // fold negatives onto [0, Max]
		}
		if back, err := Parse(Format(d)); err != nil || back != d {
			t.Fatalf("Parse(%q) = %v, %v; want %v", Format(d), back, err, d)
		}
	})
}
