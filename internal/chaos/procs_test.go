package chaos_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The worker binaries are built once per test binary, into a directory
// removed by TestMain.
var bins struct {
	once                 sync.Once
	dir, relay, consumer string
	err                  error
}

// binaries builds cmd/chaosrelay and cmd/chaosconsumer (with -race when the
// tests have it) and returns their paths.
func binaries(t *testing.T) (relay, consumer string) {
	t.Helper()
	bins.once.Do(func() {
		dir, err := os.MkdirTemp("", "outboxkit-chaos-")
		if err != nil {
			bins.err = err
			return
		}
		bins.dir = dir
		args := []string{"build", "-o", dir + string(filepath.Separator)}
		if raceEnabled {
			args = append(args, "-race")
		}
		args = append(args, "./cmd/chaosrelay", "./cmd/chaosconsumer")
		cmd := exec.Command(goTool(), args...)
		if out, err := cmd.CombinedOutput(); err != nil {
			bins.err = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
			return
		}
		bins.relay, bins.consumer = filepath.Join(dir, "chaosrelay"), filepath.Join(dir, "chaosconsumer")
	})
	if bins.err != nil {
		t.Fatalf("build the worker processes: %v", bins.err)
	}
	return bins.relay, bins.consumer
}

func cleanupBinaries() {
	if bins.dir != "" {
		_ = os.RemoveAll(bins.dir)
	}
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// proc supervises one worker process: it starts it, restarts it whenever it
// exits until stop is called, and records how each incarnation ended.
type proc struct {
	t      *testing.T
	name   string
	path   string
	args   func(n int) []string // arguments of the n-th start, from 0
	files  []*os.File           // inherited as fd 3, 4, ...
	onLine func(line string)    // each stdout line
	log    *os.File             // stderr

	mu                sync.Mutex
	cmd               *exec.Cmd
	starts            int
	killing, stopping bool
	externalKills     int // ended by a SIGKILL we sent
	selfKills         int // ended by a SIGKILL we did not send
	failures          []string
	done              chan struct{}
}

func startProc(t *testing.T, p *proc) *proc {
	t.Helper()
	p.t = t
	p.done = make(chan struct{})
	f, err := os.Create(filepath.Join(t.TempDir(), p.name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	p.log = f
	go p.loop()
	t.Cleanup(func() {
		p.stop(10 * time.Second)
		_ = f.Close()
	})
	return p
}

func (p *proc) loop() {
	defer close(p.done)
	for {
		p.mu.Lock()
		if p.stopping || len(p.failures) > 5 {
			p.mu.Unlock()
			return
		}
		cmd := exec.Command(p.path, p.args(p.starts)...)
		cmd.Stdout = &lineWriter{fn: p.onLine}
		cmd.Stderr = p.log
		cmd.ExtraFiles = p.files
		// Never outlive the test binary.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		fmt.Fprintf(p.log, "--- start %d at %s\n", p.starts, time.Now().Format(time.RFC3339Nano))
		if err := cmd.Start(); err != nil {
			p.failures = append(p.failures, fmt.Sprintf("start: %v", err))
			p.mu.Unlock()
			return
		}
		p.cmd, p.killing = cmd, false
		p.starts++
		p.mu.Unlock()

		err := cmd.Wait()

		p.mu.Lock()
		p.cmd = nil
		ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
		switch {
		case ws.Signaled() && ws.Signal() == syscall.SIGKILL && p.killing:
			p.externalKills++
		case ws.Signaled() && ws.Signal() == syscall.SIGKILL:
			p.selfKills++
		case p.stopping && ws.Exited() && ws.ExitStatus() == 0:
		default:
			p.failures = append(p.failures, fmt.Sprintf("incarnation %d ended: %v", p.starts-1, err))
		}
		fmt.Fprintf(p.log, "--- exit at %s: %v\n", time.Now().Format(time.RFC3339Nano), err)
		p.mu.Unlock()
	}
}

// kill sends SIGKILL to the running incarnation, which the loop then
// restarts. It reports whether there was one.
func (p *proc) kill() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.stopping {
		return false
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return false
	}
	p.killing = true
	return true
}

// pid is the running incarnation's process ID (0 between incarnations).
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// stop ends the process gracefully (SIGTERM) and stops restarting it.
func (p *proc) stop(timeout time.Duration) {
	p.mu.Lock()
	p.stopping = true
	if p.cmd != nil {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	p.mu.Unlock()
	select {
	case <-p.done:
		return
	case <-time.After(timeout):
	}
	p.mu.Lock()
	if p.cmd != nil {
		p.failures = append(p.failures, fmt.Sprintf("did not stop within %s of SIGTERM", timeout))
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
	}
	p.mu.Unlock()
	<-p.done
}

type procStats struct {
	starts, externalKills, selfKills int
	failures                         []string
}

func (p *proc) stats() procStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return procStats{p.starts, p.externalKills, p.selfKills, append([]string(nil), p.failures...)}
}

// logTail returns the end of the process's stderr, for failure messages.
func (p *proc) logTail() string {
	b, err := os.ReadFile(p.log.Name())
	if err != nil {
		return err.Error()
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// lineWriter calls fn for each complete line written to it. exec.Cmd
// writes to it from one goroutine.
type lineWriter struct {
	fn  func(string)
	buf []byte
}

func (w *lineWriter) Write(b []byte) (int, error) {
	w.buf = append(w.buf, b...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(b), nil
		}
		if w.fn != nil {
			w.fn(string(w.buf[:i]))
		}
		w.buf = w.buf[i+1:]
	}
}

// pausedLine is the store's log line for a paused WAL stream
// (postgres/wakeup.go), as the relay's text handler writes it: its time
// and how long the stream stays closed.
var pausedLine = regexp.MustCompile(`(?m)^time=(\S+) .*msg="outbox WAL [^"]* paused[^"]*".* for=(\S+)$`)

// wakeupPausedUntil is when the WAL stream of the process's current
// incarnation is back from its latest logged pause (zero for none).
func (p *proc) wakeupPausedUntil() time.Time {
	b, err := os.ReadFile(p.log.Name())
	if err != nil {
		return time.Time{}
	}
	if i := bytes.LastIndex(b, []byte("--- start ")); i >= 0 {
		b = b[i:]
	}
	var until time.Time
	for _, m := range pausedLine.FindAllSubmatch(b, -1) {
		at, err1 := time.Parse(time.RFC3339Nano, string(m[1]))
		d, err2 := time.ParseDuration(string(m[2]))
		if err1 == nil && err2 == nil && at.Add(d).After(until) {
			until = at.Add(d)
		}
	}
	return until
}
