package repocheck

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestCoreImportsOnlyTheStandardLibrary: core is the contract every adapter
// meets in; it may use the standard library and its own stdlib-only helpers.
func TestCoreImportsOnlyTheStandardLibrary(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	pkgs, err := ListPackages(root, "./core")
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) != 1 || len(pkgs[0].Deps) == 0 {
		t.Fatalf("go list ./core gave %d packages: the check would prove nothing", len(pkgs))
	}
	allowed := []string{Module + "/core", Module + "/internal/logs"}
	for _, d := range pkgs[0].Deps {
		if IsStandard(d) {
			continue
		}
		ok := false
		for _, a := range allowed {
			ok = ok || d == a || strings.HasPrefix(d, a+"/")
		}
		if !ok {
			t.Errorf("core imports %s: core may import only the standard library (and %v)", d, allowed[1:])
		}
	}
}

// TestRootRequirementsStayLean: what the root go.mod requires, a service
// that imports the library inherits.
func TestRootRequirementsStayLean(t *testing.T) {
	t.Parallel()
	reqs, err := Requirements(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) == 0 {
		t.Fatal("the root go.mod requires nothing: the check would prove nothing")
	}
	for _, r := range reqs {
		if r.Indirect {
			continue
		}
		if _, ok := RootRequirements[r.Path]; !ok {
			t.Errorf("the root module requires %s directly: it belongs in a module of its own (allowed: %v)", r.Path, keys(RootRequirements))
		}
	}
	if bad := ForbiddenIn(paths(reqs)); len(bad) > 0 {
		t.Errorf("the root go.mod lists %v, which must stay out of a user's module graph", bad)
	}
}

// TestLibraryPackagesImportNoOTelSDK keeps the OpenTelemetry SDK and
// exporters out of library code in every module: a library that imports them
// takes the choice of exporter, sampler and resource away from the program
// using it. Programs (examples, contrib), test helpers (internal) and tests
// may import them.
func TestLibraryPackagesImportNoOTelSDK(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	dirs, err := WorkspaceModules(root)
	if err != nil {
		t.Fatal(err)
	}
	checked := map[string]bool{}
	for _, dir := range dirs {
		pkgs, err := ListPackages(dir, "./...")
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pkgs {
			rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, Module), "/")
			if !IsLibrary(rel) {
				continue
			}
			checked[rel] = true
			for _, d := range p.Deps {
				if strings.HasPrefix(d, "go.opentelemetry.io/otel/sdk") || strings.HasPrefix(d, "go.opentelemetry.io/otel/exporters") {
					t.Errorf("library package %s imports %s: library code may import the OpenTelemetry API only", p.ImportPath, d)
				}
			}
		}
	}
	for _, must := range []string{"core", "tracing", "postgres", "qstash", "adapters/memory", "adapters/watermill"} {
		if !checked[must] {
			t.Errorf("package %s was not checked (checked: %v)", must, keys(checked))
		}
	}
}

// TestServiceModuleGraphStaysLean builds what a service's own module would
// be: it imports core, postgres, qstash and tracing, and `go mod tidy` picks
// its requirements. Nothing from the transports, the OTel SDK, gRPC,
// protobuf, lib/pq or the QStash SDK may appear in `go list -m all`.
func TestServiceModuleGraphStaysLean(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	dir := t.TempDir()
	goMod := "module example.com/service\n\ngo 1.26.0\n\nrequire " + Module + " v0.0.0\n\nreplace " + Module + " => " + filepath.ToSlash(root) + "\n"
	mainGo := `package main

import (
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
	"github.com/outboxkit/outboxkit/qstash"
	"github.com/outboxkit/outboxkit/tracing"
)

func main() {
	fmt.Println(core.NewID(), postgres.New[*pgxpool.Pool], postgres.New[*sql.DB], qstash.NewPublisher, tracing.NewInjector)
}
`
	for name, body := range map[string]string{"go.mod": goMod, "main.go": mainGo} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{"GOWORK=off", "GOFLAGS=-mod=mod"}
	if _, err := goCmd(dir, env, "mod", "tidy"); err != nil {
		t.Fatal(err)
	}
	if _, err := goCmd(dir, env, "build", "./..."); err != nil {
		t.Fatal(err)
	}
	out, err := goCmd(dir, env, "list", "-m", "all")
	if err != nil {
		t.Fatal(err)
	}
	var mods []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			mods = append(mods, f[0])
		}
	}
	if len(mods) < 3 {
		t.Fatalf("go list -m all gave %v: the check would prove nothing", mods)
	}
	if bad := ForbiddenIn(mods); len(bad) > 0 {
		t.Errorf("a service importing core, postgres, qstash and tracing inherits %v (%d modules in all):\n%s", bad, len(mods), out)
	}
	t.Logf("a service importing the library has %d modules in its graph", len(mods))
}

func TestForbiddenIn(t *testing.T) {
	got := ForbiddenIn([]string{"github.com/jackc/pgx/v5", "google.golang.org/grpc", "go.opentelemetry.io/otel", "go.opentelemetry.io/otel/sdk/metric", "github.com/lib/pq"})
	want := []string{"google.golang.org/grpc", "go.opentelemetry.io/otel/sdk/metric", "github.com/lib/pq"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("ForbiddenIn = %v, want %v", got, want)
	}
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func paths(rs []GoModRequirement) []string {
	var ps []string
	for _, r := range rs {
		ps = append(ps, r.Path)
	}
	return ps
}

// TestEveryModuleIsInTheWorkspace: make test reaches a module only through
// go.work, so a go.mod missing from it would have its tests silently skipped.
func TestEveryModuleIsInTheWorkspace(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	files, err := TrackedFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	dirs, err := WorkspaceModules(root)
	if err != nil {
		t.Fatal(err)
	}
	inWork := map[string]bool{}
	for _, d := range dirs {
		inWork[filepath.Clean(d)] = true
	}
	n := 0
	for _, f := range files {
		if filepath.Base(f) != "go.mod" || strings.Contains(f, "testdata/") {
			continue
		}
		n++
		dir := filepath.Clean(filepath.Join(root, filepath.Dir(f)))
		if !inWork[dir] {
			t.Errorf("%s is not in go.work: `go work use ./%s`, or make test will not run its tests", f, filepath.Dir(f))
		}
	}
	if n < 2 {
		t.Fatalf("found %d tracked go.mod files: the check would prove nothing", n)
	}
}
