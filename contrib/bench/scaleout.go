package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/outboxkit/outboxkit/core"
)

// scaleResult is one scale-out drain.
type scaleResult struct {
	seconds    float64
	maxHWMMiB  float64 // largest peak RSS among the relay processes
	cpuUsPerEv float64 // relay processes' CPU per event, in µs
	dbUsPerEv  float64 // their PostgreSQL backends' CPU per event, in µs
	claimMs    float64
	settleMs   float64
	pipeMs     float64
	check      Check
}

// child is one relay process as the parent sees it.
type child struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	lines   chan string // stdout lines other than progress; closed at EOF
	stderr  syncBuffer
	record  string
	settled int64
	report  *relayReport
}

func (c *child) wait(ctx context.Context, prefix string, timeout time.Duration) (string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				return "", fmt.Errorf("relay process exited: %s", strings.TrimSpace(c.stderr.String()))
			}
			if strings.HasPrefix(l, prefix) {
				return strings.TrimPrefix(l, prefix), nil
			}
		case <-t.C:
			return "", fmt.Errorf("relay process did not say %q within %v", prefix, timeout)
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// syncBuffer is a bytes.Buffer safe to read while the child process's
// stderr is still being copied into it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// progress is a relay process's "n <settled>" line, or its end of output.
type progress struct {
	child   int
	settled int64
	eof     bool
}

// startChild re-executes this program as relay process number idx; its
// progress lines go to prog.
func (b *bench) startChild(ctx context.Context, idx int, prog chan<- progress, schemaName, record, profile string) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{"-role", "relay", "-dsn", b.o.dsn, "-schema", schemaName, "-record", record,
		"-procs-batch", strconv.Itoa(b.o.procBatch), "-relay-concurrency", strconv.Itoa(b.o.procConc)}
	if profile != "" {
		args = append(args, "-relay-cpuprofile", profile)
	}
	c := &child{record: record, lines: make(chan string, 1024)}
	c.cmd = exec.CommandContext(ctx, exe, args...)
	c.cmd.Env = append(os.Environ(), childEnv+"=1")
	c.cmd.Stderr = &c.stderr
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "n "); ok {
				if k, err := strconv.ParseInt(v, 10, 64); err == nil {
					prog <- progress{child: idx, settled: k}
					continue
				}
			}
			c.lines <- sc.Text()
		}
		close(c.lines)
		prog <- progress{child: idx, eof: true}
	}()
	return c, nil
}

// scaleOut preloads the outbox and times procs relay processes draining it
// together; then it checks every event was published and none twice under
// one lease.
func (b *bench) scaleOut(ctx context.Context, procs, rep int) (scaleResult, error) {
	n := b.o.events
	s, err := b.outboxSchema(ctx)
	if err != nil {
		return scaleResult{}, err
	}
	defer s.drop()
	ids, err := preloadOutbox(ctx, s, n)
	if err != nil {
		return scaleResult{}, err
	}
	dir, err := os.MkdirTemp("", "outboxkit-bench-")
	if err != nil {
		return scaleResult{}, err
	}
	defer os.RemoveAll(dir)

	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	children := make([]*child, 0, procs)
	defer func() {
		for _, c := range children {
			c.stdin.Close()
			_ = c.cmd.Wait()
		}
	}()
	// Buffered for every line the children can print, so a reader
	// goroutine never blocks once the parent stops listening.
	prog := make(chan progress, n+4*procs)
	for i := 0; i < procs; i++ {
		c, err := b.startChild(cctx, i, prog, s.name, filepath.Join(dir, fmt.Sprintf("relay-%d.rec", i)), b.profilePath(rep, "scaleout", fmt.Sprintf("procs=%d", procs), fmt.Sprintf("relay%d", i)))
		if err != nil {
			return scaleResult{}, err
		}
		children = append(children, c)
	}
	for _, c := range children {
		if _, err := c.wait(ctx, "ready", 30*time.Second); err != nil {
			return scaleResult{}, err
		}
	}

	start := time.Now()
	for _, c := range children {
		if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
			return scaleResult{}, err
		}
	}
	if err := awaitSettled(ctx, children, prog, int64(n), drainTimeout(n)); err != nil {
		return scaleResult{}, err
	}
	elapsed := time.Since(start)

	res := scaleResult{seconds: elapsed.Seconds()}
	var cpu, dbCPU float64
	var claims, settles, pipes float64
	for _, c := range children {
		if _, err := io.WriteString(c.stdin, "stop\n"); err != nil {
			return scaleResult{}, err
		}
		line, err := c.wait(ctx, "done ", 30*time.Second)
		if err != nil {
			return scaleResult{}, err
		}
		c.report = &relayReport{}
		if err := json.Unmarshal([]byte(line), c.report); err != nil {
			return scaleResult{}, err
		}
		res.maxHWMMiB = max(res.maxHWMMiB, float64(c.report.HWMKiB)/1024)
		cpu += c.report.CPUSeconds
		dbCPU += c.report.DBSeconds
		claims += c.report.ClaimMs
		settles += c.report.SettleMs
		pipes += c.report.PipeMs
	}
	for _, c := range children {
		c.stdin.Close()
		if err := c.cmd.Wait(); err != nil {
			return scaleResult{}, fmt.Errorf("relay process: %v: %s", err, c.stderr.String())
		}
	}
	children = nil
	res.cpuUsPerEv = cpu * 1e6 / float64(n)
	res.dbUsPerEv = dbCPU * 1e6 / float64(n)
	res.claimMs = claims / float64(procs)
	res.settleMs = settles / float64(procs)
	res.pipeMs = pipes / float64(procs)

	left, err := pendingCount(ctx, s)
	if err != nil {
		return scaleResult{}, err
	}
	res.check, err = checkRecords(dir, procs, ids, left)
	return res, err
}

// awaitSettled reads the children's progress until together they have
// settled want events.
func awaitSettled(ctx context.Context, children []*child, prog <-chan progress, want int64, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	total := int64(0)
	for total < want {
		select {
		case p := <-prog:
			c := children[p.child]
			if p.eof {
				return fmt.Errorf("relay process exited early: %s", strings.TrimSpace(c.stderr.String()))
			}
			total += p.settled - c.settled
			c.settled = p.settled
		case <-deadline.C:
			return fmt.Errorf("scale-out drain timed out with %d of %d events settled", total, want)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// checkRecords reads every relay process's publish records and checks that
// every preloaded event was published, that no (event, lease token) pair
// was published twice, and that no lease token appears in two processes:
// no row was published by two relays under one lease.
func checkRecords(dir string, procs int, ids []core.ID, pending int64) (Check, error) {
	type pub struct {
		proc  int
		token core.ID
	}
	byEvent := make(map[core.ID][]pub, len(ids))
	tokenProc := make(map[core.ID]int)
	var records, noLease, sharedTokens int64
	for p := 0; p < procs; p++ {
		data, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("relay-%d.rec", p)))
		if err != nil {
			return Check{}, err
		}
		if len(data)%recordSize != 0 {
			return Check{}, fmt.Errorf("record file of relay %d is %d bytes, not a multiple of %d", p, len(data), recordSize)
		}
		for off := 0; off < len(data); off += recordSize {
			var id, tok core.ID
			copy(id[:], data[off:off+16])
			copy(tok[:], data[off+16:off+32])
			records++
			if tok.IsZero() {
				noLease++
			}
			if q, ok := tokenProc[tok]; ok && q != p {
				sharedTokens++
			}
			tokenProc[tok] = p
			byEvent[id] = append(byEvent[id], pub{p, tok})
		}
	}
	var missing, twice, sameLease, crossProc int64
	for _, id := range ids {
		ps := byEvent[id]
		if len(ps) == 0 {
			missing++
			continue
		}
		if len(ps) > 1 {
			twice++
			for i := range ps {
				for j := i + 1; j < len(ps); j++ {
					if ps[i].token == ps[j].token {
						sameLease++
					}
					if ps[i].proc != ps[j].proc {
						crossProc++
					}
				}
			}
		}
	}
	unknown := int64(len(byEvent)) - (int64(len(ids)) - missing)
	ok := missing == 0 && sameLease == 0 && sharedTokens == 0 && noLease == 0 && unknown == 0 && pending == 0
	detail := fmt.Sprintf("%d publishes of %d events by %d processes under %d leases: %d never published, %d published more than once "+
		"(%d pairs under one lease, %d pairs by two processes), %d lease tokens seen in two processes, %d publishes without a lease, %d unknown events, %d rows pending",
		records, len(ids), procs, len(tokenProc), missing, twice, sameLease, crossProc, sharedTokens, noLease, unknown, pending)
	if !ok {
		return Check{OK: false, Detail: detail}, nil
	}
	if twice > 0 {
		// Allowed by at-least-once delivery (a lease expired), but it should
		// not happen in a drain with 30 s leases: report it.
		return Check{OK: true, Detail: detail + " (redeliveries under a later lease)"}, nil
	}
	return Check{OK: true, Detail: detail}, nil
}
