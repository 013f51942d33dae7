package tracing_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLibraryPackagesImportNoOTelSDK keeps the OpenTelemetry SDK and exporters
// out of library code: a library that imports them takes the choice of
// exporter, sampler and resource away from the program using it. Programs
// (examples/, contrib/), test helpers (internal/) and tests may import them.
func TestLibraryPackagesImportNoOTelSDK(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go command not found (%v): cannot list package dependencies", err)
	}
	const module = "github.com/outboxkit/outboxkit"
	// -e: a package another engineer is midway through must not hide the
	// others; each line is a package and its transitive dependencies.
	cmd := exec.Command(goBin, "list", "-e", "-f", "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}", "./...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	checked := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		pkg, deps := fields[0], fields[1:]
		rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
		if rel == "examples" || rel == "contrib" || rel == "internal" ||
			strings.HasPrefix(rel, "examples/") || strings.HasPrefix(rel, "contrib/") || strings.HasPrefix(rel, "internal/") {
			continue
		}
		checked[rel] = true
		for _, d := range deps {
			if strings.HasPrefix(d, "go.opentelemetry.io/otel/sdk") || strings.HasPrefix(d, "go.opentelemetry.io/otel/exporters") {
				t.Errorf("library package %s imports %s: library code may import the OpenTelemetry API only", pkg, d)
			}
		}
	}
	// The check must have looked at something, or it proves nothing.
	for _, must := range []string{"core", "tracing", "adapters/memory"} {
		if !checked[must] {
			t.Errorf("package %s was not checked; go list output:\n%s", must, out)
		}
	}
	t.Logf("checked %d library packages", len(checked))
}
