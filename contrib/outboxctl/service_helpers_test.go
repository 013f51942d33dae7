package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/internal/pgtest"
)

// httpAddr waits for the relay's "serving /metrics" log line (JSON logs)
// and returns the address it gives.
func httpAddr(t *testing.T, p *proc) string {
	t.Helper()
	var addr string
	waitFor(t, 60*time.Second, "the relay's HTTP server", func() bool {
		if p.exited() {
			t.Fatalf("relay exited early (code %d):\n%s", p.code, p.stderr)
		}
		sc := bufio.NewScanner(strings.NewReader(p.stderr.String()))
		for sc.Scan() {
			var line struct {
				Msg  string
				Addr string
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && strings.HasPrefix(line.Msg, "serving /metrics") {
				addr = line.Addr
				return true
			}
		}
		return false
	})
	return "http://" + addr
}

// get fetches a URL and returns the status code and body; a request that
// fails returns code 0.
func get(t *testing.T, u string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// readyz fetches /readyz and decodes it.
func readyz(t *testing.T, base string) (int, readyReport) {
	t.Helper()
	code, body := get(t, base+"/readyz")
	var rep readyReport
	if code != 0 {
		if err := json.Unmarshal([]byte(body), &rep); err != nil {
			t.Fatalf("/readyz answered %d with a body that is not JSON: %v\n%s", code, err, body)
		}
	}
	return code, rep
}

// series is one sample of a Prometheus text exposition.
type series struct {
	name   string
	labels map[string]string
	value  float64
}

// parseMetrics reads the Prometheus text format (the subset the exporter
// writes: no timestamps, label values without newlines).
func parseMetrics(t *testing.T, body string) []series {
	t.Helper()
	var out []series
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s := series{labels: map[string]string{}}
		rest := line
		if i := strings.IndexByte(line, '{'); i >= 0 {
			s.name = line[:i]
			j := strings.LastIndexByte(line, '}')
			labels := line[i+1 : j]
			rest = strings.TrimSpace(line[j+1:])
			for labels != "" {
				eq := strings.IndexByte(labels, '=')
				key := labels[:eq]
				v, tail, err := unquoteLabel(labels[eq+1:])
				if err != nil {
					t.Fatalf("metrics line %q: %v", line, err)
				}
				s.labels[key] = v
				labels = strings.TrimPrefix(tail, ",")
			}
		} else {
			f := strings.Fields(line)
			s.name, rest = f[0], f[1]
		}
		v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		s.value = v
		out = append(out, s)
	}
	return out
}

// unquoteLabel reads a quoted label value at the start of s.
func unquoteLabel(s string) (string, string, error) {
	if !strings.HasPrefix(s, `"`) {
		return "", "", fmt.Errorf("label value not quoted")
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			i++
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			default:
				b.WriteByte(s[i])
			}
		case '"':
			return b.String(), s[i+1:], nil
		default:
			b.WriteByte(c)
		}
	}
	return "", "", fmt.Errorf("unterminated label value")
}

// metricSum sums the samples of name whose labels include want; found is
// false when none matched.
func metricSum(all []series, name string, want map[string]string) (sum float64, found bool) {
	for _, s := range all {
		if s.name != name {
			continue
		}
		ok := true
		for k, v := range want {
			ok = ok && s.labels[k] == v
		}
		if ok {
			sum += s.value
			found = true
		}
	}
	return sum, found
}

// scrape fetches and parses /metrics.
func scrape(t *testing.T, base string) []series {
	t.Helper()
	code, body := get(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics answered %d: %s", code, body)
	}
	return parseMetrics(t, body)
}

// tcpProxy forwards connections to a target until cut: then it refuses new
// connections and closes those open, as a network partition or a dead
// server looks to the relay, until restored on the same address.
type tcpProxy struct {
	target string
	addr   string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{target: target, addr: ln.Addr().String(), conns: map[net.Conn]struct{}{}}
	p.serve(ln)
	t.Cleanup(func() {
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *tcpProxy) serve(ln net.Listener) {
	p.ln = ln
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.forward(c)
			}()
		}
	}()
}

func (p *tcpProxy) forward(c net.Conn) {
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	if !p.track(c, up) {
		c.Close()
		up.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		dst.Close()
		src.Close()
	}
	go pipe(up, c)
	go pipe(c, up)
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

// track registers an open pair unless the proxy is cut.
func (p *tcpProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

// cut refuses new connections and closes every open one.
func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

// restore listens again on the same address.
func (p *tcpProxy) restore(t *testing.T) {
	t.Helper()
	var ln net.Listener
	waitFor(t, 10*time.Second, "the proxy's address to be free again", func() bool {
		var err error
		ln, err = net.Listen("tcp", p.addr)
		return err == nil
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	p.serve(ln)
}

// proxiedURL is the test database's URL through p.
func proxiedURL(t *testing.T, p *tcpProxy) string {
	t.Helper()
	u, err := url.Parse(pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.addr
	return u.String()
}

// pgAddr is the test database's host:port.
func pgAddr(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	host := u.Host
	if !strings.Contains(host, ":") {
		host += ":5432"
	}
	return host
}

// logLines returns the JSON log lines whose msg is msg.
func logLines(p *proc, msg string) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(p.stderr.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) == nil && line["msg"] == msg {
			out = append(out, line)
		}
	}
	return out
}

// withoutEnv drops the variables keys from environ.
func withoutEnv(environ []string, keys ...string) []string {
	var out []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		drop := false
		for _, key := range keys {
			drop = drop || k == key
		}
		if !drop {
			out = append(out, kv)
		}
	}
	return out
}
