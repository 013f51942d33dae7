package duration

import (
	"strconv"
	"time"
)

// Format writes d in the grammar Parse reads, exactly: whole days as "Nd",
// the rest as time.Duration.String does ("1d12h0m0s", "7d", "90ms"), so
// Parse(Format(d)) == d for every d from zero to Max. A negative d, which
// Parse refuses, is written by time.Duration.String.
func Format(d time.Duration) string {
	if d < Day {
		return d.String()
	}
	s := strconv.FormatInt(int64(d/Day), 10) + "d"
	if rest := d % Day; rest != 0 {
		s += rest.String()
	}
	return s
}
