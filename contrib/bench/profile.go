package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
)

// startProfile starts a CPU profile into path ("" does nothing) and returns
// the function that stops it. A profile that cannot be written is reported
// on stderr and skipped: it must not fail the run it was meant to explain.
func startProfile(path string) func() {
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: cpu profile:", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintln(os.Stderr, "bench: cpu profile:", err)
		f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// profilePath names the profile of one run's first repetition, or "" when
// profiles are off or this is a later repetition.
func (b *bench) profilePath(rep int, parts ...string) string {
	if b.o.profileDir == "" || rep != 0 {
		return ""
	}
	name := strings.NewReplacer("=", "", "/", "-", " ", "-", ",", "-").Replace(strings.Join(parts, "-"))
	return filepath.Join(b.o.profileDir, name+".pprof")
}
