package monitoring

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite generated files (kubernetes/prometheusrule.yaml) instead of comparing them")

const (
	kubernetesDir      = "kubernetes"
	prometheusRuleFile = "kubernetes/prometheusrule.yaml"
)

// object is the part of a Kubernetes object the tests read; the rest is
// kept as generic YAML under Spec and Data.
type object struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec      yaml.Node         `yaml:"spec"`
	Data      map[string]string `yaml:"data"`
	Resources []string          `yaml:"resources"`
	file      string
}

// readManifests parses every YAML document of every file in kubernetes/,
// strictly: a tab, a duplicate key or a broken indent fails here rather
// than at kubectl apply.
func readManifests(t *testing.T) []object {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(kubernetesDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", kubernetesDir, err)
	}
	var out []object
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for i := 0; ; i++ {
			var o object
			err := dec.Decode(&o)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s, document %d: %v", f, i+1, err)
			}
			if o.APIVersion == "" || o.Kind == "" {
				t.Errorf("%s, document %d: no apiVersion or kind", f, i+1)
			}
			if o.Kind != "Kustomization" && o.Metadata.Name == "" {
				t.Errorf("%s, document %d: %s has no metadata.name", f, i+1, o.Kind)
			}
			o.file = filepath.Base(f)
			out = append(out, o)
		}
	}
	return out
}

// decodeSpec decodes an object's spec into v.
func decodeSpec(t *testing.T, o object, v any) {
	t.Helper()
	if err := o.Spec.Decode(v); err != nil {
		t.Fatalf("%s %s: spec: %v", o.Kind, o.Metadata.Name, err)
	}
}

type probe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"`
	} `yaml:"httpGet"`
}

type deploymentSpec struct {
	Replicas int `yaml:"replicas"`
	Selector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	} `yaml:"selector"`
	Template struct {
		Metadata struct {
			Labels map[string]string `yaml:"labels"`
		} `yaml:"metadata"`
		Spec struct {
			TerminationGracePeriodSeconds int `yaml:"terminationGracePeriodSeconds"`
			Containers                    []struct {
				Name  string   `yaml:"name"`
				Image string   `yaml:"image"`
				Args  []string `yaml:"args"`
				Env   []struct {
					Name  string `yaml:"name"`
					Value string `yaml:"value"`
				} `yaml:"env"`
				Ports []struct {
					Name          string `yaml:"name"`
					ContainerPort int    `yaml:"containerPort"`
				} `yaml:"ports"`
				LivenessProbe  *probe `yaml:"livenessProbe"`
				ReadinessProbe *probe `yaml:"readinessProbe"`
				VolumeMounts   []struct {
					Name      string `yaml:"name"`
					MountPath string `yaml:"mountPath"`
				} `yaml:"volumeMounts"`
			} `yaml:"containers"`
			Volumes []struct {
				Name      string `yaml:"name"`
				ConfigMap *struct {
					Name string `yaml:"name"`
				} `yaml:"configMap"`
			} `yaml:"volumes"`
		} `yaml:"spec"`
	} `yaml:"template"`
}

// TestKubernetesManifests checks the manifests parse and fit together: the
// probes hit /healthz and /readyz on the port the relay's config serves,
// the ConfigMap is the --config file, and the Service, ServiceMonitor and
// PodDisruptionBudget select the Deployment's pods.
func TestKubernetesManifests(t *testing.T) {
	t.Parallel()
	objs := readManifests(t)
	byKind := map[string]object{}
	for _, o := range objs {
		if _, dup := byKind[o.Kind]; dup {
			t.Errorf("two %s objects: the tests (and readers) expect one", o.Kind)
		}
		byKind[o.Kind] = o
	}
	for _, k := range []string{"Deployment", "ConfigMap", "Service", "ServiceMonitor", "PodDisruptionBudget", "PrometheusRule", "Kustomization"} {
		if _, ok := byKind[k]; !ok {
			t.Fatalf("no %s in %s", k, kubernetesDir)
		}
	}
	var files []string
	for _, o := range objs {
		if o.Kind != "Kustomization" {
			files = append(files, o.file)
		}
	}
	if k := byKind["Kustomization"]; !slices.Equal(sorted(k.Resources), sorted(files)) {
		t.Errorf("kustomization.yaml lists %v, want every manifest: %v", k.Resources, files)
	}

	dep := byKind["Deployment"]
	var d deploymentSpec
	decodeSpec(t, dep, &d)
	if d.Replicas < 2 {
		t.Errorf("Deployment runs %d relay(s): run two for availability", d.Replicas)
	}
	podLabels := d.Template.Metadata.Labels
	if !subset(d.Selector.MatchLabels, podLabels) {
		t.Errorf("Deployment selector %v does not match its pods' labels %v", d.Selector.MatchLabels, podLabels)
	}
	if len(d.Template.Spec.Containers) != 1 {
		t.Fatalf("Deployment has %d containers, want the relay alone", len(d.Template.Spec.Containers))
	}
	c := d.Template.Spec.Containers[0]
	if len(c.Args) < 3 || c.Args[0] != "relay" || c.Args[1] != "--config" {
		t.Fatalf("container args %v, want relay --config FILE", c.Args)
	}
	configPath := c.Args[2]

	// The config file: mounted from the ConfigMap at the path --config names.
	cm := byKind["ConfigMap"]
	var mounted string
	for _, vm := range c.VolumeMounts {
		if strings.HasPrefix(configPath, vm.MountPath+"/") {
			for _, v := range d.Template.Spec.Volumes {
				if v.Name == vm.Name && v.ConfigMap != nil && v.ConfigMap.Name == cm.Metadata.Name {
					mounted = strings.TrimPrefix(configPath, vm.MountPath+"/")
				}
			}
		}
	}
	configText, ok := cm.Data[mounted]
	if mounted == "" || !ok {
		t.Fatalf("--config %s is not a key of ConfigMap %s mounted in the pod (keys: %v)", configPath, cm.Metadata.Name, keysOf(cm.Data))
	}
	var config map[string]any
	if err := yaml.Unmarshal([]byte(configText), &config); err != nil {
		t.Fatalf("ConfigMap %s, %s: %v", cm.Metadata.Name, mounted, err)
	}
	addr, _ := config["http-addr"].(string)
	port := strings.TrimPrefix(addr[strings.LastIndex(addr, ":"):], ":")
	var portName string
	for _, p := range c.Ports {
		if strings.TrimSpace(port) != "" && strconv.Itoa(p.ContainerPort) == port {
			portName = p.Name
		}
	}
	if portName == "" {
		t.Fatalf("no container port for the config's http-addr %q (ports %+v)", addr, c.Ports)
	}
	for name, pr := range map[string]struct {
		p    *probe
		path string
	}{"livenessProbe": {c.LivenessProbe, "/healthz"}, "readinessProbe": {c.ReadinessProbe, "/readyz"}} {
		switch {
		case pr.p == nil:
			t.Errorf("the relay has no %s", name)
		case pr.p.HTTPGet.Path != pr.path:
			t.Errorf("%s gets %s, want %s", name, pr.p.HTTPGet.Path, pr.path)
		case pr.p.HTTPGet.Port != portName && pr.p.HTTPGet.Port != port:
			t.Errorf("%s probes port %v, want the metrics port %s (%s)", name, pr.p.HTTPGet.Port, portName, port)
		}
	}
	// The grace period covers the shutdown timeout, or SIGKILL turns a
	// clean release into a lease expiry.
	shutdown := 10 * time.Second
	if s, ok := config["shutdown-timeout"].(string); ok {
		var err error
		if shutdown, err = time.ParseDuration(s); err != nil {
			t.Errorf("shutdown-timeout %q: %v", s, err)
		}
	}
	if grace := time.Duration(d.Template.Spec.TerminationGracePeriodSeconds) * time.Second; grace < shutdown+5*time.Second {
		t.Errorf("terminationGracePeriodSeconds %v is not shutdown-timeout %v plus a few seconds", grace, shutdown)
	}
	env := map[string]bool{}
	for _, e := range c.Env {
		env[e.Name] = true
	}
	for _, e := range []string{"DATABASE_URL", "QSTASH_TOKEN"} {
		if !env[e] {
			t.Errorf("the relay's environment lacks %s (from the Secret)", e)
		}
	}
	for k := range config {
		if strings.Contains(strings.ToLower(k), "token") || k == "database-url" {
			t.Errorf("the ConfigMap sets %s: secrets belong in the Secret, read through the environment", k)
		}
	}

	var svc struct {
		Selector map[string]string `yaml:"selector"`
		Ports    []struct {
			Name       string `yaml:"name"`
			Port       int    `yaml:"port"`
			TargetPort any    `yaml:"targetPort"`
		} `yaml:"ports"`
		PublishNotReadyAddresses bool `yaml:"publishNotReadyAddresses"`
	}
	service := byKind["Service"]
	decodeSpec(t, service, &svc)
	if len(svc.Selector) == 0 || !subset(svc.Selector, podLabels) {
		t.Errorf("Service selector %v does not select the relay pods (%v)", svc.Selector, podLabels)
	}
	if !svc.PublishNotReadyAddresses {
		t.Error("the Service must publish unready relays: their metrics say why they are unready")
	}
	svcPort := ""
	for _, p := range svc.Ports {
		if p.TargetPort == portName || strconv.Itoa(p.Port) == port {
			svcPort = p.Name
		}
	}
	if svcPort == "" {
		t.Errorf("no Service port targets the metrics port %s: %+v", portName, svc.Ports)
	}

	var sm struct {
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Endpoints []struct {
			Port string `yaml:"port"`
			Path string `yaml:"path"`
		} `yaml:"endpoints"`
	}
	monitor := byKind["ServiceMonitor"]
	if monitor.APIVersion != "monitoring.coreos.com/v1" {
		t.Errorf("ServiceMonitor apiVersion %s, want monitoring.coreos.com/v1", monitor.APIVersion)
	}
	decodeSpec(t, monitor, &sm)
	if len(sm.Selector.MatchLabels) == 0 || !subset(sm.Selector.MatchLabels, service.Metadata.Labels) {
		t.Errorf("ServiceMonitor selects %v, which the Service's labels %v do not match", sm.Selector.MatchLabels, service.Metadata.Labels)
	}
	if len(sm.Endpoints) != 1 || sm.Endpoints[0].Port != svcPort || sm.Endpoints[0].Path != "/metrics" {
		t.Errorf("ServiceMonitor endpoints %+v, want port %s path /metrics", sm.Endpoints, svcPort)
	}
	// OutboxRelayDown matches the job the ServiceMonitor makes: the
	// Service's name.
	for _, r := range readRules(t, alertsFile).rules() {
		if r.Alert == "OutboxRelayDown" && !strings.Contains(r.Expr, `job="`+service.Metadata.Name+`"`) {
			t.Errorf("OutboxRelayDown (%s) does not match the ServiceMonitor's job %q", r.Expr, service.Metadata.Name)
		}
	}

	var pdb struct {
		MinAvailable   any `yaml:"minAvailable"`
		MaxUnavailable any `yaml:"maxUnavailable"`
		Selector       struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
	}
	budget := byKind["PodDisruptionBudget"]
	if budget.APIVersion != "policy/v1" {
		t.Errorf("PodDisruptionBudget apiVersion %s, want policy/v1", budget.APIVersion)
	}
	decodeSpec(t, budget, &pdb)
	if len(pdb.Selector.MatchLabels) == 0 || !subset(pdb.Selector.MatchLabels, podLabels) {
		t.Errorf("PodDisruptionBudget selects %v, not the relay pods (%v)", pdb.Selector.MatchLabels, podLabels)
	}
	if n, ok := pdb.MinAvailable.(int); !ok || n < 1 || n >= d.Replicas {
		t.Errorf("PodDisruptionBudget minAvailable %v: want at least 1 and fewer than the %d replicas, or drains block", pdb.MinAvailable, d.Replicas)
	}
}

// prometheusRule is kubernetes/prometheusrule.yaml as generated from
// prometheus/alerts.yml: the same groups, wrapped for the operator.
func prometheusRule(t *testing.T) []byte {
	t.Helper()
	alerts, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	text := string(alerts)
	i := strings.Index(text, "\ngroups:\n")
	if i < 0 {
		t.Fatalf("%s has no top-level groups: line", alertsFile)
	}
	var b strings.Builder
	b.WriteString(`# Generated from ../prometheus/alerts.yml by
# go test ./contrib/monitoring -run TestPrometheusRule -update
# (TestPrometheusRule fails when the two differ): edit alerts.yml.
# For the Prometheus operator; its ruleSelector must match these labels.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: outboxkit-relay
  labels:
    app.kubernetes.io/name: outboxkit-relay
    app.kubernetes.io/part-of: outboxkit
spec:
`)
	for _, line := range strings.SplitAfter(text[i+1:], "\n") {
		if strings.TrimSpace(line) == "" {
			b.WriteString(line)
			continue
		}
		b.WriteString("  " + line)
	}
	return []byte(b.String())
}

// TestPrometheusRule keeps kubernetes/prometheusrule.yaml the same rules
// as prometheus/alerts.yml.
func TestPrometheusRule(t *testing.T) {
	want := prometheusRule(t)
	if *update {
		if err := os.WriteFile(prometheusRuleFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(prometheusRuleFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from %s: run go test ./contrib/monitoring -run TestPrometheusRule -update", prometheusRuleFile, alertsFile)
	}
	// And it is what Prometheus loads: the same rules, parsed.
	var pr struct {
		Spec ruleFile `yaml:"spec"`
	}
	if err := yaml.Unmarshal(got, &pr); err != nil {
		t.Fatal(err)
	}
	if a, b := readRules(t, alertsFile).rules(), pr.Spec.rules(); len(a) != len(b) || len(a) == 0 {
		t.Fatalf("%s has %d rules, %s %d", prometheusRuleFile, len(b), alertsFile, len(a))
	}
}

func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func keysOf(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestConfigMapIsARelayConfig hands the ConfigMap's file to the real
// `outboxctl relay --config FILE --print-config`, which refuses unknown
// keys and bad values, and checks the settings the manifests rely on took
// effect.
func TestConfigMapIsARelayConfig(t *testing.T) {
	t.Parallel()
	bin := outboxctl(t)
	var cm object
	for _, o := range readManifests(t) {
		if o.Kind == "ConfigMap" {
			cm = o
		}
	}
	text, ok := cm.Data["relay.yaml"]
	if !ok {
		t.Fatalf("ConfigMap %s has no relay.yaml (keys %v)", cm.Metadata.Name, keysOf(cm.Data))
	}
	file := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "relay", "--config", file, "--print-config")
	cmd.Env = environ()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("outboxctl relay --config (the ConfigMap's relay.yaml) --print-config: %v\n%s", err, out)
	}
	var effective map[string]string
	if err := yaml.Unmarshal(out, &effective); err != nil {
		t.Fatalf("--print-config printed no YAML mapping: %v\n%s", err, out)
	}
	var fromFile map[string]any
	if err := yaml.Unmarshal([]byte(text), &fromFile); err != nil {
		t.Fatal(err)
	}
	for k, v := range fromFile {
		want := fmt.Sprint(v)
		if list, ok := v.([]any); ok {
			var parts []string
			for _, p := range list {
				parts = append(parts, fmt.Sprint(p))
			}
			want = strings.Join(parts, ",")
		}
		if effective[k] != want {
			t.Errorf("the ConfigMap sets %s: %s, the relay's effective value is %q", k, want, effective[k])
		}
	}
}
