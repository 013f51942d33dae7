package repocheck

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// MaxTrackedBytes is the largest file the repository may track. Anything
// bigger is a build output, a capture or a data set that belongs elsewhere.
const MaxTrackedBytes = 1 << 20

// Problem is one tracked file that should not be.
type Problem struct {
	Path   string
	Reason string
}

func (p Problem) String() string { return p.Path + ": " + p.Reason }

// TrackedFiles lists the files git tracks under root, relative to it.
func TrackedFiles(root string) ([]string, error) {
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files in %s: %w", root, err)
	}
	var files []string
	for _, f := range bytes.Split(out, []byte{0}) {
		if len(f) > 0 {
			files = append(files, string(f))
		}
	}
	return files, nil
}

// CheckFiles reports every file among paths (relative to root) that is larger
// than MaxTrackedBytes or is a compiled executable. Scripts are executable
// too, so the test is on content: an object-file signature, or a NUL byte in
// a file with an execute bit.
func CheckFiles(root string, paths []string) ([]Problem, error) {
	var problems []Problem
	for _, p := range paths {
		full := filepath.Join(root, p)
		fi, err := os.Lstat(full)
		if os.IsNotExist(err) {
			continue // deleted in the work tree, not yet in the index
		}
		if err != nil {
			return nil, err
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		if fi.Size() > MaxTrackedBytes {
			problems = append(problems, Problem{p, fmt.Sprintf("%d bytes, over the %d-byte limit for tracked files", fi.Size(), MaxTrackedBytes)})
			continue
		}
		head, err := readHead(full, 8192)
		if err != nil {
			return nil, err
		}
		if kind := binaryKind(head); kind != "" {
			problems = append(problems, Problem{p, kind + " executable: build outputs are not tracked (add it to .gitignore)"})
			continue
		}
		if fi.Mode()&0o111 != 0 && bytes.IndexByte(head, 0) >= 0 {
			problems = append(problems, Problem{p, "binary file with an execute bit"})
		}
	}
	return problems, nil
}

func readHead(path string, n int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, n)
	m, err := io.ReadFull(f, buf)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return nil, err
	}
	return buf[:m], nil
}

// binaryKind names the object format whose signature head starts with.
func binaryKind(head []byte) string {
	switch {
	case bytes.HasPrefix(head, []byte("\x7fELF")):
		return "ELF"
	case bytes.HasPrefix(head, []byte("MZ")) && len(head) > 0x40:
		return "PE"
	case bytes.HasPrefix(head, []byte{0xcf, 0xfa, 0xed, 0xfe}), bytes.HasPrefix(head, []byte{0xce, 0xfa, 0xed, 0xfe}),
		bytes.HasPrefix(head, []byte{0xfe, 0xed, 0xfa, 0xcf}), bytes.HasPrefix(head, []byte{0xca, 0xfe, 0xba, 0xbe}):
		return "Mach-O"
	case bytes.HasPrefix(head, []byte("\x00asm")):
		return "WebAssembly"
	}
	return ""
}

// FormatProblems renders problems one per line.
func FormatProblems(ps []Problem) string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString(p.String())
		b.WriteByte('\n')
	}
	return b.String()
}
