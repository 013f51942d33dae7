package monitoring

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const systemdUnit = "systemd/outboxkit-relay.service"

// unitKeys reads a systemd unit's Key=Value lines by section.
func unitKeys(t *testing.T, text string) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	section := ""
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			out[section] = map[string]string{}
		case section != "" && strings.Contains(line, "="):
			k, v, _ := strings.Cut(line, "=")
			out[section][k] = v
		default:
			t.Errorf("%s: line %q is neither a section, a Key=Value nor a comment", systemdUnit, line)
		}
	}
	return out
}

// TestSystemdUnit checks the unit runs the relay with a --config file,
// stops it with SIGTERM and waits longer than the relay's shutdown timeout
// before killing it; and, where systemd-analyze is installed, that systemd
// accepts the unit without a warning.
func TestSystemdUnit(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(systemdUnit)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	u := unitKeys(t, text)
	svc := u["Service"]
	exec0, args, _ := strings.Cut(svc["ExecStart"], " ")
	if !filepath.IsAbs(exec0) || !strings.HasPrefix(args, "relay --config ") {
		t.Errorf("ExecStart=%s: want an absolute path to outboxctl, then relay --config FILE", svc["ExecStart"])
	}
	if svc["KillSignal"] != "SIGTERM" {
		t.Errorf("KillSignal=%s: the relay releases its leases on SIGTERM", svc["KillSignal"])
	}
	stop, err := time.ParseDuration(svc["TimeoutStopSec"])
	if err != nil || stop < 15*time.Second {
		t.Errorf("TimeoutStopSec=%s: want more than the relay's --shutdown-timeout (10s) plus a few seconds", svc["TimeoutStopSec"])
	}
	if svc["EnvironmentFile"] == "" {
		t.Error("no EnvironmentFile: the secrets (DATABASE_URL, QSTASH_TOKEN) come from the environment")
	}
	if u["Install"]["WantedBy"] == "" {
		t.Error("no [Install] WantedBy: systemctl enable would not start it at boot")
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("systemd-analyze is not installed: systemd's own check of the unit did not run (the checks above did)")
		return
	}
	// systemd-analyze verify wants ExecStart's binary to exist: point it
	// at the one the tests build.
	unit := filepath.Join(t.TempDir(), filepath.Base(systemdUnit))
	if err := os.WriteFile(unit, []byte(strings.Replace(text, "ExecStart="+exec0, "ExecStart="+outboxctl(t), 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(analyze, "verify", unit)
	out, err := cmd.CombinedOutput()
	// Unknown keys are only warnings to systemd: any output fails.
	if err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("systemd-analyze verify %s: %v\n%s", systemdUnit, err, out)
	}
}
