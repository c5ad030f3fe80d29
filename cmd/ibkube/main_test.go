package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBadFlagExitsTwoOnce: every subcommand takes its command line through
// one path, so a flag it does not know exits 2 with the flag package's
// message written once (and its usage), never a second time by main.
func TestBadFlagExitsTwoOnce(t *testing.T) {
	t.Parallel()
	for _, c := range subcommands() {
		if c.name == "version" {
			continue // takes no flags, and ignores its arguments
		}
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var stderr bytes.Buffer
			err := run(context.Background(), []string{c.name, "--no-such-flag"}, stdio{in: strings.NewReader(""), out: &bytes.Buffer{}, err: &stderr})
			if got := exitStatus(&stderr, err); got != 2 {
				t.Errorf("exit status %d, want 2 (err %v)", got, err)
			}
			if n := strings.Count(stderr.String(), "flag provided but not defined: -no-such-flag"); n != 1 {
				t.Errorf("message written %d times, want once:\n%s", n, stderr.String())
			}
		})
	}
}

// TestOneVoice: whatever goes wrong, ibkube names the subcommand once
// ("ibkube node: ...", never "ibkube: ibkube doctor: ..."), exits 2 for a
// command line it refuses (a bad flag value as much as an unknown flag) and
// 1 for a failure at work.
func TestOneVoice(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	badAgent := filepath.Join(dir, "agent.yaml")
	writeFile(t, badAgent, "kind: AgentConfig\npools: 3\n")
	missing := filepath.Join(dir, "missing")
	tests := []struct {
		args   []string
		status int
		want   string // the start of the one line written
	}{
		{[]string{"frob"}, 2, `ibkube frob: unknown command; accepted: inject, node, doctor, policy, version`},
		{[]string{"doctor", "-o", "yaml"}, 2, `ibkube doctor: -o "yaml": accepted: text, json`},
		{[]string{"doctor", "--memlock-max", "lots"}, 2, `ibkube doctor: --memlock-max="lots": `},
		{[]string{"doctor", "extra"}, 2, `ibkube doctor: unexpected arguments ["extra"]`},
		{[]string{"doctor", "--config", badAgent}, 1, `ibkube doctor: ` + badAgent},
		{[]string{"node", "-o", "yaml"}, 2, `ibkube node: -o "yaml": accepted: table, json, slices`},
		{[]string{"node", "-o", "slices", "--node-name", "Node_0"}, 2, `ibkube node: --node-name "Node_0": `},
		{[]string{"node", "--config", badAgent}, 1, `ibkube node: ` + badAgent},
		{[]string{"node", "--config", missing, "--sysfs-root", missing}, 1, `ibkube node: sysfs root ` + missing},
		{[]string{"inject", "-f", "-", "--namespace-labels", "=x"}, 2, `ibkube inject: --namespace-labels: invalid entry "=x"`},
		{[]string{"inject", "-f", missing}, 1, `ibkube inject: open ` + missing},
		{[]string{"policy", "x"}, 2, `ibkube policy: unexpected argument "x"`},
		{[]string{"policy", "--config", missing}, 1, `ibkube policy: open ` + missing},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			var stderr bytes.Buffer
			err := run(context.Background(), tc.args, stdio{in: strings.NewReader(""), out: &bytes.Buffer{}, err: &stderr})
			stderr.Reset() // usage text; what main writes comes next
			if got := exitStatus(&stderr, err); got != tc.status {
				t.Errorf("exit status %d, want %d (err %v)", got, tc.status, err)
			}
			line := strings.TrimSuffix(stderr.String(), "\n")
			if !strings.HasPrefix(line, tc.want) || strings.Contains(line, "\n") {
				t.Errorf("wrote %q, want one line starting %q", line, tc.want)
			}
			if name := tc.args[0]; strings.Count(line, name+": ") != 1 {
				t.Errorf("wrote %q: the subcommand %q must be named once", line, name)
			}
		})
	}
}

// writeFile writes a test's input file, and the directories above it,
// failing the test where it cannot.
func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}
