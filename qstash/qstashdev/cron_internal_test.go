package qstashdev

import (
	"testing"
	"time"

	_ "time/tzdata" // CRON_TZ tests must not depend on the host's zoneinfo
)

func TestCronNext(t *testing.T) {
	utc := func(s string) time.Time {
		v, err := time.Parse("2006-01-02 15:04", s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	ny, _ := time.LoadLocation("America/New_York")
	kolkata, _ := time.LoadLocation("Asia/Kolkata")
	for _, c := range []struct {
		expr, after string
		want        time.Time
	}{
		{"* * * * *", "2026-03-01 10:00", utc("2026-03-01 10:01")},
		{"*/15 * * * *", "2026-03-01 10:01", utc("2026-03-01 10:15")},
		{"5/20 * * * *", "2026-03-01 10:30", utc("2026-03-01 10:45")},
		{"0 9 * * MON-FRI", "2026-03-06 09:00", utc("2026-03-09 09:00")}, // Friday → Monday
		{"0 0 1 JAN *", "2026-03-01 00:00", utc("2027-01-01 00:00")},
		{"30 2 29 2 *", "2026-01-01 00:00", utc("2028-02-29 02:30")},
		{"0 12 1 * 0", "2026-03-02 00:00", utc("2026-03-08 12:00")}, // day 1 or Sunday: Sunday comes first
		{"0 12 * * 7", "2026-03-02 00:00", utc("2026-03-08 12:00")}, // 7 is Sunday
		{"0,30 8-9 * * *", "2026-03-01 08:45", utc("2026-03-01 09:00")},
		{"@hourly", "2026-03-01 08:45", utc("2026-03-01 09:00")},
		{"@daily", "2026-03-01 08:45", utc("2026-03-02 00:00")},
		{"CRON_TZ=America/New_York 0 9 * * *", "2026-03-01 14:00", time.Date(2026, 3, 2, 9, 0, 0, 0, ny)},
		{"CRON_TZ=America/New_York 0 9 * * *", "2026-03-01 13:59", time.Date(2026, 3, 1, 9, 0, 0, 0, ny)},
		// New York springs forward on 2026-03-08: 9:00 EDT is 13:00 UTC.
		{"CRON_TZ=America/New_York 0 9 * * *", "2026-03-07 15:00", utc("2026-03-08 13:00")},
		// 02:30 does not exist that day; the next day's is the next match.
		{"CRON_TZ=America/New_York 30 2 * * *", "2026-03-08 05:00", time.Date(2026, 3, 9, 2, 30, 0, 0, ny)},
		{"CRON_TZ=Asia/Kolkata 0 * * * *", "2026-03-01 10:00", time.Date(2026, 3, 1, 16, 0, 0, 0, kolkata)},
		{"TZ=Asia/Kolkata 45 10 * * *", "2026-03-01 00:00", time.Date(2026, 3, 1, 10, 45, 0, 0, kolkata)},
	} {
		spec, err := parseCron(c.expr)
		if err != nil {
			t.Errorf("parseCron(%q): %v", c.expr, err)
			continue
		}
		if got := spec.next(utc(c.after)); !got.Equal(c.want) {
			t.Errorf("%q after %s: %v, want %v", c.expr, c.after, got.UTC(), c.want.UTC())
		}
	}
}

func TestCronRefused(t *testing.T) {
	for _, expr := range []string{
		"", "* * * *", "* * * * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * * 13 *", "* * * * 8",
		"5-1 * * * *", "*/0 * * * *", "a * * * *", ",1 * * * *", "0 0 30 2 *", "CRON_TZ=Nowhere/Land * * * * *",
		"CRON_TZ= * * * * *",
	} {
		if _, err := parseCron(expr); err == nil {
			t.Errorf("parseCron(%q) accepted", expr)
		}
	}
}
