package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The --config file is YAML, what Kubernetes ConfigMaps hold. Its keys are
// the relay's flag names (global flags included) with the same values as on
// the command line, plus `databases`, a list of further databases:
//
//	database-url: ${DATABASE_URL}
//	schemas: tenant_a,tenant_b   # or a list, or "*" (quoted: * is YAML syntax)
//	destination: https://billing.example.com/qstash/orders
//	batch-size: 200
//	databases:
//	  - name: eu                 # the database label; default host:port/dbname
//	    url: ${EU_DATABASE_URL}
//	    wakeup-url: ${EU_WAKEUP_URL}
//	    schemas: ["*"]
//	    table: outbox_events
//	    max-conns: 10
//
// ${NAME} in a value is replaced by the environment variable NAME, so
// secrets stay in the environment (a Kubernetes Secret) while the file
// stays in a ConfigMap. A flag on the command line wins over its
// environment variable, which wins over the file, which wins over the
// default. An unknown key is an error, so a typo does not go unnoticed.

// configKeysNotInFile are flags that make no sense in the file.
var configKeysNotInFile = map[string]bool{"config": true, "print-config": true, "help": true, "h": true}

// envRef is ${NAME} in a config value.
var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// flagEnvRE finds the environment variable a flag's usage names.
var flagEnvRE = regexp.MustCompile(`\(env ([A-Z][A-Z0-9_]*)`)

// flagEnv is the environment variable that sets flag f, if any; the usage
// text names it, which keeps --help and the precedence rule in one place.
func flagEnv(f *flag.Flag) string {
	if m := flagEnvRE.FindStringSubmatch(f.Usage); m != nil {
		return m[1]
	}
	return ""
}

// loadConfigFile applies the --config file to the flags that neither the
// command line nor their environment variable set.
func (s *relaySettings) loadConfigFile(fs *flagSet, getenv func(string) string, given map[string]bool) error {
	if s.configFile == "" {
		return nil
	}
	file := s.configFile
	bad := func(format string, args ...any) error {
		return usageError(fmt.Sprintf("--config %s: ", file) + fmt.Sprintf(format, args...))
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return bad("%v", errors.Unwrap(err))
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return bad("not YAML: %v (quote a lone * as \"*\")", err)
	}
	if len(doc.Content) == 0 {
		return nil // an empty file sets nothing
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return bad("want a mapping of flag names to values (batch-size: 100), not a %s", kindName(root))
	}
	onCommandLine := map[string]bool{}
	for name := range given { // global flags before the command name
		onCommandLine[name] = true
	}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	expand := func(v string) string {
		return envRef.ReplaceAllStringFunc(v, func(ref string) string { return getenv(ref[2 : len(ref)-1]) })
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		key := k.Value
		if seen[key] {
			return bad("line %d: %s is given twice", k.Line, key)
		}
		seen[key] = true
		if key == "databases" {
			dbs, err := parseDatabases(v, expand)
			if err != nil {
				return bad("%v", err)
			}
			s.databases = dbs
			continue
		}
		f := fs.Lookup(key)
		if f == nil || configKeysNotInFile[key] {
			return bad("line %d: unknown key %q: the keys are the flags of outboxctl relay --help, without dashes in front, and databases", k.Line, key)
		}
		value, err := scalarOrList(v, expand)
		if err != nil {
			return bad("line %d: %s: %v", v.Line, key, err)
		}
		if onCommandLine[key] {
			continue // the flag wins
		}
		if env := flagEnv(f); env != "" && getenv(env) != "" {
			continue // so does its environment variable
		}
		if err := fs.Set(key, value); err != nil {
			return bad("line %d: %s: %s", v.Line, key, doubleDash(err.Error()))
		}
	}
	return nil
}

// scalarOrList reads a value: a scalar as written, a list of scalars
// joined by commas (schemas: [a, b]).
func scalarOrList(v *yaml.Node, expand func(string) string) (string, error) {
	switch v.Kind {
	case yaml.ScalarNode:
		if v.Tag == "!!null" {
			return "", nil
		}
		return expand(v.Value), nil
	case yaml.SequenceNode:
		parts := make([]string, 0, len(v.Content))
		for _, c := range v.Content {
			if c.Kind != yaml.ScalarNode {
				return "", fmt.Errorf("a list holds plain values only, not a %s", kindName(c))
			}
			parts = append(parts, expand(c.Value))
		}
		return strings.Join(parts, ","), nil
	}
	return "", fmt.Errorf("want a value or a list of values, not a %s", kindName(v))
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.AliasNode:
		return "YAML alias (quote a lone * as \"*\")"
	}
	return "value"
}

// parseDatabases reads the databases list.
func parseDatabases(v *yaml.Node, expand func(string) string) ([]databaseSpec, error) {
	if v.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("line %d: databases: want a list of databases (- url: ...), not a %s", v.Line, kindName(v))
	}
	var out []databaseSpec
	for _, item := range v.Content {
		if item.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("line %d: databases: each entry is a mapping (url, name, schemas, table, wakeup-url, max-conns)", item.Line)
		}
		var d databaseSpec
		for i := 0; i+1 < len(item.Content); i += 2 {
			k, val := item.Content[i], item.Content[i+1]
			s, err := scalarOrList(val, expand)
			if err != nil {
				return nil, fmt.Errorf("line %d: databases: %s: %v", val.Line, k.Value, err)
			}
			switch k.Value {
			case "name":
				d.Name = s
			case "url":
				d.URL = s
			case "wakeup-url":
				d.WakeupURL = s
			case "schemas":
				d.Schemas = splitSchemas(s)
			case "table":
				d.Table = s
			case "max-conns":
				n, err := strconv.Atoi(s)
				if err != nil || n < 1 {
					return nil, fmt.Errorf("line %d: databases: max-conns %q: want a positive number", val.Line, s)
				}
				d.MaxConns = n
			default:
				return nil, fmt.Errorf("line %d: databases: unknown key %q: use url, name, schemas, table, wakeup-url or max-conns", k.Line, k.Value)
			}
		}
		if d.URL == "" {
			return nil, fmt.Errorf("line %d: databases: an entry has no url (an empty ${VARIABLE}?)", item.Line)
		}
		out = append(out, d)
	}
	return out, nil
}

// redactedValue is how --print-config shows a setting: secrets as ***,
// URLs without their credentials.
func redactedValue(name, value string) string {
	switch {
	case value == "":
		return ""
	case isSecretFlag(name):
		return "***"
	case isURLFlag(name) || name == "url":
		return displayURL(value)
	}
	return value
}

// printRelayConfig prints the effective settings as a --config file.
func (a *app) printRelayConfig(fs *flagSet, s *relaySettings) error {
	root := &yaml.Node{Kind: yaml.MappingNode}
	add := func(m *yaml.Node, k, v string) {
		m.Content = append(m.Content,
			&yaml.Node{Kind: yaml.ScalarNode, Value: k},
			&yaml.Node{Kind: yaml.ScalarNode, Value: v, Style: scalarStyle(v)})
	}
	fs.VisitAll(func(f *flag.Flag) {
		if configKeysNotInFile[f.Name] {
			return
		}
		add(root, f.Name, redactedValue(f.Name, f.Value.String()))
	})
	if len(s.databases) > 0 {
		list := &yaml.Node{Kind: yaml.SequenceNode}
		for _, d := range s.databases {
			m := &yaml.Node{Kind: yaml.MappingNode}
			for _, kv := range [][2]string{{"name", d.Name}, {"url", d.URL}, {"wakeup-url", d.WakeupURL},
				{"schemas", strings.Join(d.Schemas, ",")}, {"table", d.Table}} {
				if kv[1] != "" {
					add(m, kv[0], redactedValue(kv[0], kv[1]))
				}
			}
			if d.MaxConns > 0 {
				add(m, "max-conns", strconv.Itoa(d.MaxConns))
			}
			list.Content = append(list.Content, m)
		}
		root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: "databases"}, list)
	}
	var b bytes.Buffer
	b.WriteString("# outboxctl relay: effective configuration (--config file format).\n")
	b.WriteString("# Secrets are shown as ***: give them through the environment.\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return err
	}
	_ = enc.Close()
	_, err := a.stdout.Write([]byte(a.redact(b.String())))
	return err
}

// scalarStyle quotes values YAML would read as something else (an empty
// string, a lone *, true/false that are meant as text are fine either way).
func scalarStyle(v string) yaml.Style {
	if v == "" || strings.ContainsAny(v[:1], "*&!|>'\"%@`{}[],#?:-") || strings.Contains(v, ": ") || strings.Contains(v, " #") {
		return yaml.DoubleQuotedStyle
	}
	return 0
}
