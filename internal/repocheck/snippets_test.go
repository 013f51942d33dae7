package repocheck

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestDocSnippetsAreCompiled: every ```go block of CompiledDocs appears,
// verbatim but for indentation and blank lines, in a tracked Go file that
// the build compiles (examples/databases, examples/sqlc, the adapters'
// example tests), so a snippet that stops compiling fails CI, and a page
// edited apart from its code does too.
func TestDocSnippetsAreCompiled(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	files, err := TrackedFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	srcs, err := CompiledGoFiles(root, files)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(srcs))
	for f := range srcs {
		names = append(names, f)
	}
	sort.Strings(names)
	for _, doc := range CompiledDocs {
		md, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		snippets := GoSnippets(string(md))
		if len(snippets) < 5 {
			t.Fatalf("%s has %d ```go blocks: the check would prove little", doc, len(snippets))
		}
		for _, s := range snippets {
			found := ""
			for _, f := range names {
				if Contains(srcs[f], s.Text) {
					found = f
					break
				}
			}
			if found == "" {
				first := snippetLines(s.Text)
				t.Errorf("%s:%d: the ```go block starting %q is in no compiled, tracked Go file: copy the page's block from the code (examples/databases), or fix the code and the page together", doc, s.Line, first[0])
			} else {
				t.Logf("%s:%d: in %s", doc, s.Line, found)
			}
		}
	}
}

func TestSnippetMatching(t *testing.T) {
	t.Parallel()
	md := "# Page\n\n```go\nx := f()\n\nif x {\n\treturn\n}\n```\n\ntext\n\n```sh\nnot go\n```\n\n   ```go\n\tlast()\n   ```\n"
	got := GoSnippets(md)
	if len(got) != 2 || got[0].Line != 3 || got[1].Line != 17 || !strings.Contains(got[0].Text, "return") || strings.TrimSpace(got[1].Text) != "last()" {
		t.Fatalf("GoSnippets = %+v", got)
	}
	src := "package p\n\nfunc g() {\n\tx := f()\n\tif x {\n\t\treturn\n\t}\n}\n"
	if !Contains(src, got[0].Text) {
		t.Error("a block indented differently, with a blank line more, was not found")
	}
	for _, bad := range []string{
		"x := f()\nif !x {\n\treturn\n}", // a changed line
		"if x {\n\treturn\n}\nx := f()",  // lines out of order
		"x := f()\n\treturn",             // lines not consecutive
	} {
		if Contains(src, bad) {
			t.Errorf("Contains found %q, which the source does not hold", bad)
		}
	}
	if got := GoSnippets("```go\nunclosed()\n"); len(got) != 0 {
		t.Errorf("an unclosed block was taken: %+v", got)
	}
}
