package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progress reports a long operation. On a terminal it redraws one line in
// place: a bar when the total is known, a spinner and a running count
// otherwise. Elsewhere (a pipe, a log file, CI) it prints a plain line at
// most once per plainEvery, since carriage returns turn logs into noise.
type progress struct {
	w        io.Writer
	terminal bool
	label    string
	unit     string
	total    int64 // 0 when unknown
	start    time.Time

	mu        sync.Mutex
	n         int64
	lastDraw  time.Time
	lastPlain time.Time
	frame     int
	drawn     bool

	stop chan struct{}
	wg   sync.WaitGroup
}

const (
	redrawEvery = 100 * time.Millisecond
	plainEvery  = time.Second
	barWidth    = 30
)

// startProgress begins reporting an operation described by label
// ("pruning") counting unit ("events"); total is 0 when unknown. Call done
// when the operation ends.
func (a *app) startProgress(label, unit string, total int64) *progress {
	p := &progress{w: a.stdout, terminal: a.terminal, label: label, unit: unit, total: total, start: time.Now(), stop: make(chan struct{})}
	if p.terminal {
		// The spinner and the clock keep moving while a single long
		// statement runs and no count arrives.
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			t := time.NewTicker(redrawEvery)
			defer t.Stop()
			for {
				select {
				case <-p.stop:
					return
				case <-t.C:
					p.mu.Lock()
					p.drawLocked(true)
					p.mu.Unlock()
				}
			}
		}()
	}
	return p
}

// set records the running count.
func (p *progress) set(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n = n
	now := time.Now()
	if p.terminal {
		if now.Sub(p.lastDraw) >= redrawEvery {
			p.drawLocked(false)
		}
		return
	}
	if now.Sub(p.lastPlain) >= plainEvery {
		p.lastPlain = now
		fmt.Fprintf(p.w, "%s: %d %s so far (%s)\n", p.label, n, p.unit, formatDuration(time.Since(p.start)))
	}
}

// done stops the display and clears the progress line, leaving the caller
// to print the result.
func (p *progress) done() {
	close(p.stop)
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.terminal && p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

func (p *progress) drawLocked(tick bool) {
	p.lastDraw = time.Now()
	if tick {
		p.frame++
	}
	elapsed := formatDuration(time.Since(p.start).Truncate(100 * time.Millisecond))
	var line string
	if p.total > 0 {
		frac := float64(p.n) / float64(p.total)
		frac = min(max(frac, 0), 1)
		filled := int(frac * barWidth)
		bar := strings.Repeat("=", filled)
		if filled < barWidth {
			bar += ">" + strings.Repeat(" ", barWidth-filled-1)
		}
		line = fmt.Sprintf("%s [%s] %3.0f%%  %d/%d %s  %s", p.label, bar, frac*100, p.n, p.total, p.unit, elapsed)
	} else {
		spin := `|/-\`[p.frame%4]
		line = fmt.Sprintf("%s %c  %d %s  %s", p.label, spin, p.n, p.unit, elapsed)
	}
	fmt.Fprint(p.w, "\r\033[K"+line)
	p.drawn = true
}
