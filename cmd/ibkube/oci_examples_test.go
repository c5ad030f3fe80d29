package main

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/ibkube/ibkube/hca/discovery"
	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/node/config"
	"github.com/ibkube/ibkube/node/resource"
)

// TestOCIExampleValues: the per-shape chart values under examples/oci are
// agent configs the agent accepts, and on the BM.GPU.H100.8 fixture the
// H100 file's pool holds exactly the 16 ports oci-hpc-oke's NCCL_IB_HCA
// names (docs/recommended-nccl-rccl-parameters-by-shape.md line 38).
func TestOCIExampleValues(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("..", "..", "examples", "oci", "values-*.yaml"))
	if err != nil || len(files) != 3 {
		t.Fatalf("examples/oci/values-*.yaml: %v, %v", files, err)
	}
	dir := fixture.BuildTemp(t, fixture.OCIH100)
	node, err := discovery.NewScanner(discovery.Options{SysfsRoot: fixture.SysfsRoot(dir), DevRoot: fixture.DevRoot(dir)}).Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var values struct {
			Agent struct {
				Config map[string]any `json:"config"`
			} `json:"agent"`
		}
		if err := yaml.Unmarshal(b, &values); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		// The chart writes apiVersion and kind above the values
		// (templates/agent-configmap.yaml).
		values.Agent.Config["apiVersion"], values.Agent.Config["kind"] = "ibkube.io/v1alpha1", "AgentConfig"
		body, _ := yaml.Marshal(values.Agent.Config)
		cfg, err := config.Parse(body)
		if err != nil {
			t.Fatalf("%s: the agent refuses its config: %v", f, err)
		}
		if filepath.Base(f) != "values-bm-gpu-h100-8.yaml" {
			continue
		}
		m := resource.Build(cfg, node, resource.Options{HostDevRoot: "/dev"})
		var got []string
		for _, h := range m.HCAs {
			for _, r := range h.Resources {
				if r == "rdma/roce" {
					got = append(got, h.HCA.Name)
				}
			}
		}
		sort.Strings(got)
		want := []string{"mlx5_0", "mlx5_1", "mlx5_10", "mlx5_12", "mlx5_13", "mlx5_14", "mlx5_15", "mlx5_16", "mlx5_17", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s on the BM.GPU.H100.8 fixture: rdma/roce ports (-want +got):\n%s", f, d)
		}
	}
}
