package qstashdev

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Upstash-Cron is a standard five-field cron expression (minute, hour, day
// of month, month, day of week), optionally preceded by CRON_TZ=<IANA
// zone> (TZ= is read too); without one, times are UTC, as in QStash. A
// field is *, a value, a range a-b, any of them with a step /n, or a
// comma-separated list of those; months and days of the week may be
// written by name (JAN, MON), and day of week 7 is Sunday like 0. When
// both day fields are restricted, a day matches either (Vixie cron's
// rule). The macros @yearly, @annually, @monthly, @weekly, @daily,
// @midnight and @hourly stand for their usual expressions. QStash's finest
// resolution is a minute, and so is this one's.

// cronSpec is a parsed Upstash-Cron.
type cronSpec struct {
	src                           string
	loc                           *time.Location
	minute, hour, dom, month, dow uint64 // bit i set: value i matches
	domRestricted, dowRestricted  bool
}

type cronField struct {
	name     string
	min, max int
	names    []string // names[i] is value min+i
}

var (
	cronMinute = cronField{name: "minute", min: 0, max: 59}
	cronHour   = cronField{name: "hour", min: 0, max: 23}
	cronDom    = cronField{name: "day of month", min: 1, max: 31}
	cronMonth  = cronField{name: "month", min: 1, max: 12,
		names: []string{"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"}}
	// Day of week runs to 7 so that 7 can mean Sunday, as in most crons.
	cronDow = cronField{name: "day of week", min: 0, max: 7,
		names: []string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}}
)

var cronMacros = map[string]string{
	"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
	"@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}

// maxCronBytes bounds an expression: the header is user input.
const maxCronBytes = 512

func parseCron(src string) (*cronSpec, error) {
	if len(src) > maxCronBytes {
		return nil, fmt.Errorf("longer than %d bytes", maxCronBytes)
	}
	c := &cronSpec{src: src, loc: time.UTC}
	expr := strings.TrimSpace(src)
	for _, prefix := range []string{"CRON_TZ=", "TZ="} {
		if rest, ok := strings.CutPrefix(expr, prefix); ok {
			zone, rest, _ := strings.Cut(rest, " ")
			loc, err := time.LoadLocation(zone)
			if err != nil || zone == "" || strings.EqualFold(zone, "local") {
				return nil, fmt.Errorf("unknown time zone %q: use an IANA name such as America/New_York", zone)
			}
			c.loc, expr = loc, strings.TrimSpace(rest)
			break
		}
	}
	if m, ok := cronMacros[strings.ToLower(expr)]; ok {
		expr = m
	}
	fields := strings.Fields(expr)
	if len(fields) != 5 {
		return nil, fmt.Errorf("%q has %d fields: want minute hour day-of-month month day-of-week, such as \"*/5 * * * *\" (optionally after CRON_TZ=<zone>)", src, len(fields))
	}
	var err error
	for i, dst := range []*uint64{&c.minute, &c.hour, &c.dom, &c.month, &c.dow} {
		f := [...]cronField{cronMinute, cronHour, cronDom, cronMonth, cronDow}[i]
		if *dst, err = f.parse(fields[i]); err != nil {
			return nil, err
		}
	}
	if c.dow&(1<<7) != 0 {
		c.dow |= 1 // 7 is Sunday
	}
	c.domRestricted = !strings.HasPrefix(fields[2], "*")
	c.dowRestricted = !strings.HasPrefix(fields[4], "*")
	if c.next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return nil, fmt.Errorf("%q never fires (a day that no month has?)", src)
	}
	return c, nil
}

func (f cronField) parse(s string) (uint64, error) {
	var bits uint64
	for _, part := range strings.Split(s, ",") {
		rng, stepS, hasStep := strings.Cut(part, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepS)
			if err != nil || n < 1 || n > f.max {
				return 0, fmt.Errorf("%s: step %q is not a number from 1 to %d", f.name, stepS, f.max)
			}
			step = n
		}
		lo, hi := f.min, f.max
		switch {
		case rng == "*":
		case rng == "":
			return 0, fmt.Errorf("%s: empty value in %q", f.name, s)
		default:
			a, b, isRange := strings.Cut(rng, "-")
			var err error
			if lo, err = f.value(a); err != nil {
				return 0, err
			}
			hi = lo
			if isRange {
				if hi, err = f.value(b); err != nil {
					return 0, err
				}
				if hi < lo {
					return 0, fmt.Errorf("%s: range %q runs backwards", f.name, rng)
				}
			} else if hasStep {
				hi = f.max // "5/15" means 5-max/15
			}
		}
		for v := lo; v <= hi; v += step {
			bits |= 1 << v
		}
	}
	return bits, nil
}

func (f cronField) value(s string) (int, error) {
	for i, n := range f.names {
		if strings.EqualFold(s, n) {
			return f.min + i, nil
		}
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < f.min || v > f.max {
		return 0, fmt.Errorf("%s: %q is not a value from %d to %d", f.name, s, f.min, f.max)
	}
	return v, nil
}

func (c *cronSpec) dayMatches(t time.Time) bool {
	dom := c.dom&(1<<t.Day()) != 0
	dow := c.dow&(1<<int(t.Weekday())) != 0
	if c.domRestricted && c.dowRestricted {
		return dom || dow
	}
	return dom && dow
}

// next returns the first time strictly after after, at a whole minute,
// that the expression matches in its zone, or the zero time if there is
// none within five years.
func (c *cronSpec) next(after time.Time) time.Time {
	t := after.In(c.loc).Truncate(time.Minute).Add(time.Minute)
	limit := t.Year() + 5
wrap:
	for t.Year() <= limit {
		for c.month&(1<<int(t.Month())) == 0 {
			t = time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, c.loc)
			if t.Month() == time.January {
				continue wrap
			}
		}
		for !c.dayMatches(t) {
			t = time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, c.loc)
			if t.Day() == 1 {
				continue wrap
			}
		}
		for c.hour&(1<<t.Hour()) == 0 {
			// To the next whole local hour by adding, not with Date, so a
			// daylight-saving jump cannot loop; in local minutes, so zones
			// with half-hour offsets work.
			t = t.Add(time.Hour - time.Duration(t.Minute())*time.Minute)
			if t.Hour() == 0 {
				continue wrap
			}
		}
		for c.minute&(1<<t.Minute()) == 0 {
			t = t.Add(time.Minute)
			if t.Minute() == 0 {
				continue wrap
			}
		}
		return t
	}
	return time.Time{}
}
