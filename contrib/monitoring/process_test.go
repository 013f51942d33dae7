package monitoring

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// binDir holds the outboxctl binary the tests build once (TestMain removes
// it).
var binDir string

var (
	buildOnce sync.Once
	buildErr  error
)

// outboxctl builds contrib/outboxctl from the workspace once and returns
// the binary's path. It is built without -race: contrib/outboxctl's own
// tests race-check it, and here it only has to serve what Prometheus
// scrapes, quickly.
func outboxctl(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(binDir, "outboxctl")
	buildOnce.Do(func() {
		cmd := exec.Command("go", "build", "-o", bin, "github.com/outboxkit/outboxkit/contrib/outboxctl")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build contrib/outboxctl: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return bin
}

// syncBuffer is a bytes.Buffer a process's output and the test may use at
// once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// proc is a process a test started; it is stopped (SIGTERM, then SIGKILL)
// when the test ends.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error
}

func startProc(t *testing.T, name string, env []string, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(bin, args...), out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		defer close(p.done)
		p.err = p.cmd.Wait()
	}()
	t.Cleanup(func() {
		if p.exited() {
			return
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
			t.Errorf("%s did not stop within 15s of SIGTERM", name)
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", name, tail(p.out.String(), 60))
		}
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// alive fails the test when the process has ended.
func (p *proc) alive(t *testing.T) {
	t.Helper()
	if p.exited() {
		t.Fatalf("%s exited (%v):\n%s", p.name, p.err, tail(p.out.String(), 60))
	}
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"..."}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// waitFor polls cond every 100ms until it holds, failing the test at the
// deadline with what it waited for and cond's last word. Polling a
// condition, never sleeping a fixed time, is how these tests wait.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s (last: %s)", timeout, what, last)
		}
		<-tick.C
	}
}

// freeAddr returns a loopback address no one listens on now. A process
// started next may take it; the window is small and a clash fails loudly.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// httpGet returns the status and body of GET url, with a short timeout.
func httpGet(url string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// environ is the test's environment without the variables outboxctl reads,
// plus extra: a developer's shell must not change what the relay does.
func environ(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "OUTBOX") || strings.HasPrefix(k, "OTEL_") || strings.HasPrefix(k, "QSTASH_") ||
			k == "DATABASE_URL" || k == "NATS_URL" || k == "AMQP_URL" {
			continue
		}
		out = append(out, kv)
	}
	return append(out, extra...)
}
