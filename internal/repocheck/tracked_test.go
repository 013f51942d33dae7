package repocheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// repoRoot is this checkout's top level.
func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse --show-toplevel: %v (the repository checks need a git checkout)", err)
	}
	return strings.TrimSpace(string(out))
}

// TestNoTrackedBinaries is the check itself, over this repository.
func TestNoTrackedBinaries(t *testing.T) {
	root := repoRoot(t)
	files, err := TrackedFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("git tracks no files here: the check would prove nothing")
	}
	problems, err := CheckFiles(root, files)
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) > 0 {
		t.Fatalf("tracked files that must not be:\n%s", FormatProblems(problems))
	}
}

// TestCheckFilesFindsWhatItMust builds each bad case on purpose and one of
// each good case beside it.
func TestCheckFilesFindsWhatItMust(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), data, mode); err != nil {
			t.Fatal(err)
		}
	}
	elf := append([]byte("\x7fELF\x02\x01\x01"), make([]byte, 100)...)
	write("outboxctl", elf, 0o755)
	write("lib.so", elf, 0o644) // an object file even without the bit
	write("big.json", []byte(strings.Repeat("x", MaxTrackedBytes+1)), 0o644)
	write("blob", []byte("abc\x00def"), 0o755)
	write("run.sh", []byte("#!/bin/sh\necho ok\n"), 0o755)
	write("data.bin", []byte("abc\x00def"), 0o644) // binary data, not executable: allowed
	write("main.go", []byte("package main\n"), 0o644)

	problems, err := CheckFiles(dir, []string{"outboxctl", "lib.so", "big.json", "blob", "run.sh", "data.bin", "main.go", "gone.txt"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, p := range problems {
		got[p.Path] = true
	}
	for _, want := range []string{"outboxctl", "lib.so", "big.json", "blob"} {
		if !got[want] {
			t.Errorf("%s not reported; problems: %v", want, problems)
		}
	}
	for _, ok := range []string{"run.sh", "data.bin", "main.go", "gone.txt"} {
		if got[ok] {
			t.Errorf("%s reported but is allowed", ok)
		}
	}
}
