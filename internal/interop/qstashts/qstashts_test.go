package qstashts_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core/coretest"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

const (
	usCurrentKey = "sig_usEast1CurrentKeyForTsSuite"
	usNextKey    = "sig_usEast1NextKeyForTsSuite00"
	usToken      = "us-east-1-token-for-the-ts-suite"
)

// tool finds a program the suite needs, failing with what to do.
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found in PATH: the TypeScript SDK suite needs Node.js 20 or newer and npm. Install them (apt-get install nodejs npm; .ci/services.sh does it in CI) and run the test again", name)
	}
	return p
}

// npmCI installs the SDK from the committed lock file. The cache lives in
// testdata/.npm-cache (ignored by git), so once filled it needs no network.
func npmCI(t *testing.T, npm, dir string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--prefer-offline", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error",
		"--cache", filepath.Join(dir, ".npm-cache"))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "npm_config_update_notifier=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
	}
}

// serve runs a qstashdev server on a loopback port.
func serve(t *testing.T, cfg qstashdev.Config) (*qstashdev.Server, string) {
	t.Helper()
	srv, err := qstashdev.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return srv, "http://" + ln.Addr().String()
}

// TestTypeScriptSDK runs testdata/suite.test.mjs against three qstashdev
// servers: main (the real clock, retries scaled down), sched (a fake clock
// that the suite moves through the control server, for schedules) and us
// (the US_EAST_1 region, with a token and keys of its own).
func TestTypeScriptSDK(t *testing.T) {
	node, npm := tool(t, "node"), tool(t, "npm")
	dir, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	npmCI(t, npm, dir)

	mainSrv, mainURL := serve(t, qstashdev.Config{BackoffScale: 0.001})
	// The fake clock stays within the SDK's token checks, which use real
	// time: it starts four minutes back, so tokens signed after a few
	// one-minute runs are neither expired (exp = iat + 5m) nor from the
	// future.
	clock := coretest.NewFakeClock(time.Now().Add(-4 * time.Minute).Truncate(time.Minute))
	schedSrv, schedURL := serve(t, qstashdev.Config{Clock: clock})
	usSrv, usURL := serve(t, qstashdev.Config{Region: "US_EAST_1", Token: usToken, CurrentSigningKey: usCurrentKey, NextSigningKey: usNextKey})
	servers := map[string]*qstashdev.Server{"main": mainSrv, "sched": schedSrv, "us": usSrv}

	control := controlServer(t, servers, clock)
	port := mainURL[strings.LastIndex(mainURL, ":")+1:]

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "--test-concurrency=1", "suite.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(),
		"QSTASH_URL="+mainURL, "QSTASH_TOKEN="+qstashdev.DefaultToken,
		"QSTASH_CURRENT_SIGNING_KEY="+qstashdev.DefaultCurrentSigningKey, "QSTASH_NEXT_SIGNING_KEY="+qstashdev.DefaultNextSigningKey,
		"QSTASH_DEV_PORT="+port, "SCHED_URL="+schedURL, "US_URL="+usURL, "US_TOKEN="+usToken,
		"US_CURRENT_SIGNING_KEY="+usCurrentKey, "US_NEXT_SIGNING_KEY="+usNextKey, "CONTROL_URL="+control,
		"NO_COLOR=1",
	)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var lines []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	err = cmd.Wait()
	report := strings.Join(lines, "\n")
	if err != nil {
		t.Fatalf("the TypeScript SDK suite failed (%v):\n%s", err, report)
	}
	if !strings.Contains(report, "fail 0") || !strings.Contains(report, "pass ") {
		t.Fatalf("the TypeScript SDK suite did not report its results:\n%s", report)
	}
	t.Logf("TypeScript SDK suite:\n%s", report)
}

// cleanEnv is the environment without QStash's variables, so a developer's
// own QSTASH_* (or QSTASH_DEV, QSTASH_REGION) cannot redirect the SDK.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.Contains(k, "QSTASH") || strings.HasPrefix(k, "UPSTASH_") || k == "NODE_OPTIONS" {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// controlServer lets the suite wait for a server to be idle (POST
// /idle?server=main) and move the fake clock to a schedule's run (POST
// /tick?at=<unix ms>), once the server armed its timer for it.
func controlServer(t *testing.T, servers map[string]*qstashdev.Server, clock *coretest.FakeClock) string {
	t.Helper()
	var mu sync.Mutex // one clock move at a time
	mux := http.NewServeMux()
	mux.HandleFunc("POST /idle", func(w http.ResponseWriter, r *http.Request) {
		srv := servers[r.URL.Query().Get("server")]
		if srv == nil {
			http.Error(w, "unknown server", http.StatusBadRequest)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
		defer cancel()
		if err := srv.WaitIdle(ctx); err != nil {
			http.Error(w, fmt.Sprintf("WaitIdle: %v; pending %+v", err, srv.Messages()), http.StatusGatewayTimeout)
			return
		}
		io.WriteString(w, "idle")
	})
	mux.HandleFunc("POST /tick", func(w http.ResponseWriter, r *http.Request) {
		ms, err := strconv.ParseInt(r.URL.Query().Get("at"), 10, 64)
		if err != nil {
			http.Error(w, "at must be unix milliseconds", http.StatusBadRequest)
			return
		}
		at := time.UnixMilli(ms)
		mu.Lock()
		defer mu.Unlock()
		if at.After(clock.Now()) {
			ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
			defer cancel()
			if err := clock.WaitForDeadline(ctx, at); err != nil {
				http.Error(w, fmt.Sprintf("no timer armed for %v (now %v)", at, clock.Now()), http.StatusGatewayTimeout)
				return
			}
			clock.Set(at)
		}
		// The run's messages are created under the server's lock when its
		// scheduler wakes; wait until it moved past at.
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		srv := servers["sched"]
		err = srv.WaitFor(ctx, func() bool {
			for _, s := range srv.Schedules() {
				if !s.NextScheduleTime.After(at) {
					return false
				}
			}
			return true
		})
		if err != nil {
			http.Error(w, "the schedules did not run: "+err.Error(), http.StatusGatewayTimeout)
			return
		}
		io.WriteString(w, clock.Now().UTC().Format(time.RFC3339))
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = hs.Serve(ln)
	}()
	t.Cleanup(func() {
		hs.Close()
		<-done
	})
	return "http://" + ln.Addr().String()
}
