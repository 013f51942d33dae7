package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRoutesRefuseDuplicateKeys: both formats refuse an event type routed
// twice; JSON used to keep the last one silently.
func TestRoutesRefuseDuplicateKeys(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"a=x\na=y": `event type "a" is routed twice`,
		`{"a": "https://a.example/1", "b": "g", "a": "https://a.example/2"}`:  `event type "a" is routed twice`,
		`{"a": {"url": "https://a.example/1", "url": "https://a.example/2"}}`: `"a": key "url" appears twice`,
		`{"a": {"urlGroup": "g", "queue": "q1", "queue": "q2"}}`:              `"a": key "queue" appears twice`,
	} {
		_, err := parseRoutes([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseRoutes(%q) = %v, want an error containing %q", in, err, want)
		}
	}
	// Same keys in different objects are not duplicates.
	if _, err := parseRoutes([]byte(`{"a": {"urlGroup": "g", "queue": "q"}, "b": {"urlGroup": "g", "queue": "q"}}`)); err != nil {
		t.Errorf("distinct objects: %v", err)
	}
	for _, bad := range []string{`{"a": "x"} {"b": "y"}`, `{"a": "x"`, `{"a": "x",}`, "{" + strings.Repeat(`"a":[`, 20000)} {
		if _, err := parseRoutes([]byte(bad)); err == nil {
			t.Errorf("parseRoutes(%q) accepted a bad file", bad)
		}
	}
}

// TestRoutesFileMustBeSmallRegularFile: --routes reads a regular file of
// at most 1 MiB. /dev/zero used to be read until memory ran out (a GiB a
// second), a FIFO blocked the relay's start forever.
func TestRoutesFileMustBeSmallRegularFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "routes.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	big := filepath.Join(dir, "big.txt")
	var b strings.Builder
	for i := 0; b.Len() <= 1<<20; i++ {
		b.WriteString("type" + strings.Repeat("x", 20) + "." + strconv.Itoa(i) + "=https://hooks.example/in\n")
	}
	if err := os.WriteFile(big, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	justRight := filepath.Join(dir, "ok.txt")
	if err := os.WriteFile(justRight, []byte(b.String()[:strings.LastIndexByte(b.String()[:1<<20], '\n')+1]), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{"/dev/zero", "is a device"},
		{fifo, "is a named pipe"},
		{dir, "is a directory"},
		{big, "larger than 1 MiB"},
	} {
		t.Run(filepath.Base(tc.path), func(t *testing.T) {
			t.Parallel()
			p := start(t, env(), "relay", "--qstash-token", "x", "--routes", tc.path, "--database-url", "postgres://127.0.0.1:1/x")
			code := p.wait(t, 20*time.Second)
			r := result{code: code, stdout: p.stdout.String(), stderr: p.stderr.String()}
			wantOneLineError(t, r, exitError, "--routes "+tc.path, tc.want)
		})
	}
	// A file of 1 MiB or less is read: the relay gets as far as the
	// database.
	r := cli(t, env(), "relay", "--qstash-token", "x", "--routes", justRight, "--database-url", "postgres://127.0.0.1:1/x")
	wantOneLineError(t, r, exitError, "cannot reach PostgreSQL")
}
