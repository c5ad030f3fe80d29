package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/ibkube/ibkube/internal/testing/errtest"
)

func TestRunPolicy(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "webhook.yaml")
	writeFile(t, cfg, "apiVersion: ibkube.io/v1alpha1\nkind: WebhookConfig\nmemlock: 32Gi\nprofiles:\n- {name: site, base: ndv5, nccl: {NCCL_DEBUG: WARN}}\n")
	cases := []struct {
		name             string
		args             []string
		wantOut, wantErr []string
	}{
		{name: "defaults", args: nil, wantOut: []string{
			"kind: ConfigMap", "name: ibkube-admission-params", "namespace: ibkube-system", "memlock: unlimited",
			"kind: MutatingAdmissionPolicy", "kind: MutatingAdmissionPolicyBinding", "kind: ValidatingAdmissionPolicy", "kind: ValidatingAdmissionPolicyBinding",
		}},
		{name: "a site's config with a user profile", args: []string{"--config", cfg, "--release-namespace", "rdma", "--prefix", "rdma", "--exclude-namespaces", "ci, monitoring"},
			wantOut: []string{"name: rdma-admission-params", "namespace: rdma", "memlock: 32Gi", "profile.site.conf.rdma.whole:", "NCCL_DEBUG=WARN", "- ci\n", "- monitoring\n"}},
		{name: "bad config", args: []string{"--config", "/nonexistent.yaml"}, wantErr: []string{"policy: open /nonexistent.yaml"}},
		{name: "positional argument", args: []string{"x"}, wantErr: []string{`policy: unexpected argument "x"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			err := runPolicy(context.Background(), tc.args, stdio{out: &out, err: &errOut})
			for _, w := range tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v, want it to contain %q", err, w)
				}
			}
			if len(tc.wantErr) == 0 && err != nil {
				t.Fatalf("runPolicy: %v", err)
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q", w)
				}
			}
		})
	}
}

// TestRunPolicyRefusesBadNames: a flag the API server would refuse on one
// object (a binding) but not another stops the command with exit status 2,
// naming the flag and what it accepts, and writes nothing to apply.
func TestRunPolicyRefusesBadNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr []string
	}{
		{"upper-case excluded namespace", []string{"--exclude-namespaces", "ci,Monitoring"},
			[]string{"--exclude-namespaces", `excluded namespace 2 "Monitoring"`, "accepted: namespace names"}},
		{"stray comma in excluded namespaces", []string{"--exclude-namespaces", "ci,,monitoring"},
			[]string{"--exclude-namespaces", `excluded namespace 2 ""`}},
		{"prefix with an underscore", []string{"--prefix", "my_ibkube"},
			[]string{"--prefix", `prefix "my_ibkube"`, "accepted: the start of an object name"}},
		{"empty prefix", []string{"--prefix", ""}, []string{"--prefix"}},
		{"prefix too long", []string{"--prefix", strings.Repeat("a", 237)}, []string{"--prefix", "237 characters", "at most 236 characters"}},
		{"release namespace with a dot", []string{"--release-namespace", "ibkube.system"},
			[]string{"--release-namespace", `release namespace "ibkube.system"`, "accepted: a namespace name"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			err := runPolicy(context.Background(), tc.args, stdio{out: &out, err: &errOut})
			errtest.Names(t, err, tc.wantErr...)
			if got := exitStatus(&errOut, err); got != 2 {
				t.Errorf("exit status %d, want 2 (usage)", got)
			}
			if out.Len() > 0 {
				t.Errorf("wrote %d bytes to apply after a refusal", out.Len())
			}
		})
	}
	// The longest prefix accepted still renders.
	if err := runPolicy(context.Background(), []string{"--prefix", strings.Repeat("a", 236)}, stdio{out: &bytes.Buffer{}, err: &bytes.Buffer{}}); err != nil {
		t.Errorf("prefix of 236 characters: %v", err)
	}
}

// TestRunPolicyChartData: --chart-data writes what the chart ships.
func TestRunPolicyChartData(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := runPolicy(context.Background(), []string{"--chart-data"}, stdio{out: &out, err: &bytes.Buffer{}}); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join("..", "..", "charts", "ibkube", "files", "admission-policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var w, g map[string]any
	if err := yaml.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(out.Bytes(), &g); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(w, g); diff != "" {
		t.Errorf("--chart-data differs from the chart's file (run make policy-chart):\n%s", diff)
	}
}
