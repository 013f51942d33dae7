package repocheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// Module is the root module's path.
const Module = "github.com/outboxkit/outboxkit"

// RootRequirements is every module the root go.mod may require directly.
// A service that imports the library inherits this list; anything else
// belongs in a module of its own (adapters/*, contrib/*, examples,
// internal/chaos, internal/interop).
var RootRequirements = map[string]string{
	"github.com/jackc/pgx/v5":         "the PostgreSQL store",
	"github.com/jackc/pglogrepl":      "the WAL wake-up's replication protocol (same author as pgx)",
	"github.com/golang-jwt/jwt/v5":    "QStash signatures",
	"go.opentelemetry.io/otel":        "the OpenTelemetry API",
	"go.opentelemetry.io/otel/metric": "the OpenTelemetry API",
	"go.opentelemetry.io/otel/trace":  "the OpenTelemetry API",
	"go.uber.org/goleak":              "tests only: goroutine leak checks",
}

// Forbidden lists module path prefixes that must never reach the module
// graph of a service importing core, postgres, qstash and tracing.
var Forbidden = []string{
	"github.com/ThreeDotsLabs/",
	"github.com/nats-io/",
	"github.com/rabbitmq/",
	"github.com/streadway/amqp",
	"go.opentelemetry.io/otel/sdk",
	"go.opentelemetry.io/otel/exporters",
	"go.opentelemetry.io/proto",
	"google.golang.org/grpc",
	"google.golang.org/protobuf",
	"github.com/golang/protobuf",
	"github.com/grpc-ecosystem/",
	"github.com/lib/pq",
	"github.com/upstash/",
}

// ForbiddenIn returns the module paths among mods that match Forbidden.
func ForbiddenIn(mods []string) []string {
	var bad []string
	for _, m := range mods {
		for _, f := range Forbidden {
			if strings.HasPrefix(m, f) {
				bad = append(bad, m)
				break
			}
		}
	}
	return bad
}

// GoModRequirement is one require line of a go.mod.
type GoModRequirement struct {
	Path     string
	Version  string
	Indirect bool
}

// Requirements reads the require lines of the go.mod in dir.
func Requirements(dir string) ([]GoModRequirement, error) {
	out, err := goCmd(dir, nil, "mod", "edit", "-json")
	if err != nil {
		return nil, err
	}
	var m struct{ Require []GoModRequirement }
	if err := json.Unmarshal(out, &m); err != nil {
		return nil, fmt.Errorf("parse go mod edit -json: %w", err)
	}
	return m.Require, nil
}

// Package is what `go list -json` says of a package, as far as the checks
// need it.
type Package struct {
	ImportPath string
	Standard   bool
	Deps       []string
	Module     *struct{ Path string }
}

// ListPackages runs `go list -deps=false -json` on patterns in dir.
func ListPackages(dir string, patterns ...string) ([]Package, error) {
	out, err := goCmd(dir, nil, append([]string{"list", "-e", "-json=ImportPath,Standard,Deps,Module"}, patterns...)...)
	if err != nil {
		return nil, err
	}
	var pkgs []Package
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p Package
		if err := dec.Decode(&p); err != nil {
			return nil, fmt.Errorf("parse go list: %w", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
}

// IsStandard reports whether an import path belongs to the standard library
// (no dot in its first element).
func IsStandard(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

func goCmd(dir string, env []string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("go %s in %s: %w\n%s", strings.Join(args, " "), dir, err, stderr.String())
	}
	return out, nil
}

// WorkspaceModules lists the directories of the modules in root's go.work
// (just root when there is none).
func WorkspaceModules(root string) ([]string, error) {
	out, err := goCmd(root, nil, "list", "-m", "-f", "{{.Dir}}")
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(out)), nil
}

// IsLibrary reports whether a package path relative to the root module is
// library code a service may import, rather than a program, a test helper or
// a test-only module.
func IsLibrary(rel string) bool {
	for _, p := range []string{"examples", "contrib", "internal"} {
		if rel == p || strings.HasPrefix(rel, p+"/") {
			return false
		}
	}
	return !strings.Contains("/"+rel+"/", "/internal/") && !strings.HasSuffix(rel, "/test")
}
