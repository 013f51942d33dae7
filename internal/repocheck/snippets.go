package repocheck

import (
	"os"
	"path/filepath"
	"strings"
)

// CompiledDocs are the pages whose ```go blocks must each appear in a
// compiled Go file, so that what readers copy is what CI builds.
var CompiledDocs = []string{"docs/DATABASES.md"}

// Snippet is one ```go block of a Markdown page.
type Snippet struct {
	Line int    // of the opening fence, 1-based
	Text string // the block's lines, without the fences
}

// GoSnippets returns the ```go blocks of a Markdown text.
func GoSnippets(md string) []Snippet {
	var out []Snippet
	var cur *Snippet
	var body []string
	for i, line := range strings.Split(md, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && trimmed == "```go":
			cur, body = &Snippet{Line: i + 1}, nil
		case cur != nil && trimmed == "```":
			cur.Text = strings.Join(body, "\n")
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			body = append(body, line)
		}
	}
	return out
}

// snippetLines is s as the comparison sees it: each line trimmed of the
// whitespace around it (indentation may differ, a page's block starts at
// column 0 where the code is inside a function), blank lines dropped.
func snippetLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// Contains reports whether src holds snippet's lines, consecutively and in
// order, modulo indentation and blank lines.
func Contains(src, snippet string) bool {
	want := snippetLines(snippet)
	if len(want) == 0 {
		return true
	}
	have := snippetLines(src)
	for i := 0; i+len(want) <= len(have); i++ {
		if have[i] != want[0] {
			continue
		}
		j := 1
		for j < len(want) && have[i+j] == want[j] {
			j++
		}
		if j == len(want) {
			return true
		}
	}
	return false
}

// CompiledGoFiles returns, of files (relative to root), the Go files a
// build or `go vet` compiles: tests and examples included; files under
// testdata, and those excluded by a `//go:build ignore` line, not.
func CompiledGoFiles(root string, files []string) (map[string]string, error) {
	out := map[string]string{}
	for _, f := range files {
		if !strings.HasSuffix(f, ".go") || strings.Contains("/"+f, "/testdata/") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, f))
		if os.IsNotExist(err) {
			continue // deleted in the work tree, not yet in the index
		}
		if err != nil {
			return nil, err
		}
		src := string(b)
		if strings.Contains(src, "\n//go:build ignore\n") || strings.HasPrefix(src, "//go:build ignore\n") {
			continue
		}
		out[f] = src
	}
	return out, nil
}
