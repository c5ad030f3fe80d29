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
)

func TestRunPolicy(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "webhook.yaml")
	if err := os.WriteFile(cfg, []byte("apiVersion: ibkube.io/v1alpha1\nkind: WebhookConfig\nmemlock: 32Gi\nprofiles:\n- {name: site, base: ndv5, nccl: {NCCL_DEBUG: WARN}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
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
			wantOut: []string{"name: rdma-admission-params", "namespace: rdma", "memlock: 32Gi", "profile.site.nccl:", "NCCL_DEBUG=WARN", "- ci\n", "- monitoring\n"}},
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
