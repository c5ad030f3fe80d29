package aligned

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/internal/testing/golden"
)

// TestTemplateGolden renders the templates of the shapes the fixtures'
// machines take whole: ND H100 v5 (8 GPUs, 8 HCAs), OCI BM.GPU.H100.8 (8
// GPUs, two RoCE ports each), and an uneven one (4 GPUs, 3 HCAs).
func TestTemplateGolden(t *testing.T) {
	t.Parallel()
	for _, s := range []Shape{
		{GPUs: 8, HCAs: 8, GPUClass: "gpu.nvidia.com", HCAClass: contract.DeviceClassIB},
		{GPUs: 8, HCAs: 16, GPUClass: "gpu.nvidia.com", HCAClass: contract.DeviceClassRoCE},
		{GPUs: 4, HCAs: 3, GPUClass: "gpu.nvidia.com", HCAClass: contract.DeviceClassIB},
		{GPUs: 1, HCAs: 1, GPUClass: "gpu.nvidia.com", HCAClass: contract.DeviceClassIB},
	} {
		t.Run(s.Name(), func(t *testing.T) {
			t.Parallel()
			tmpl, err := Template(s, "team")
			if err != nil {
				t.Fatal(err)
			}
			data, err := yaml.Marshal(tmpl)
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join("testdata", s.Name()+".yaml"), data)
		})
	}
}

// TestEveryHCAIsPaired: whatever the counts, the HCA requests ask exactly
// the pod's HCAs, the GPU requests its GPUs, and each pair's first two
// rungs are joined to its GPU by pcieRoot and numaNode.
func TestEveryHCAIsPaired(t *testing.T) {
	t.Parallel()
	for gpus := 1; gpus <= MaxGPUs; gpus++ {
		for hcas := 1; gpus+hcas <= 32; hcas++ {
			s := Shape{GPUs: gpus, HCAs: hcas, GPUClass: "g", HCAClass: "h"}
			spec, err := Spec(s)
			if err != nil {
				t.Fatalf("%+v: %v", s, err)
			}
			var gotGPUs, gotHCAs int64
			for _, r := range spec.Devices.Requests {
				if r.Exactly != nil {
					gotGPUs += r.Exactly.Count
					continue
				}
				for _, sub := range r.FirstAvailable[1:] {
					if sub.Count != r.FirstAvailable[0].Count {
						t.Errorf("%+v: %s's rungs ask %d and %d HCAs", s, r.Name, r.FirstAvailable[0].Count, sub.Count)
					}
				}
				gotHCAs += r.FirstAvailable[0].Count
			}
			if gotGPUs != int64(gpus) || gotHCAs != int64(hcas) {
				t.Errorf("%+v: the claim asks %d GPUs and %d HCAs", s, gotGPUs, gotHCAs)
			}
			if want := 2 * min(gpus, hcas); len(spec.Devices.Constraints) != want {
				t.Errorf("%+v: %d constraints, want %d (two per pair)", s, len(spec.Devices.Constraints), want)
			}
		}
	}
}

func TestValidateNamesWhatIsAccepted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		shape Shape
		want  string
	}{
		{Shape{GPUs: 0, HCAs: 1, GPUClass: "g", HCAClass: "h"}, "0 GPUs; accepted: 1 to 16"},
		{Shape{GPUs: 17, HCAs: 1, GPUClass: "g", HCAClass: "h"}, "17 GPUs; accepted: 1 to 16"},
		{Shape{GPUs: 8, HCAs: 0, GPUClass: "g", HCAClass: "h"}, "0 HCAs; accepted: at least 1"},
		{Shape{GPUs: 8, HCAs: 25, GPUClass: "g", HCAClass: "h"}, "33 devices; accepted: at most 32"},
		{Shape{GPUs: 8, HCAs: 8, HCAClass: "h"}, `GPU class "", HCA class "h"; accepted: both`},
	} {
		if _, err := Spec(tc.shape); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Spec(%+v) = %v, want an error containing %q", tc.shape, err, tc.want)
		}
	}
}

func TestRungOf(t *testing.T) {
	t.Parallel()
	type rung struct {
		Pair int
		Rung string
		OK   bool
	}
	for in, want := range map[string]rung{
		"hcas-3/numa-node": {3, RungNUMANode, true},
		"hcas-0/pcie-root": {0, RungPCIeRoot, true},
		"gpu-0":            {},
		"gpus-unpaired":    {},
		"hcas-x/any":       {},
	} {
		var got rung
		got.Pair, got.Rung, got.OK = RungOf(in)
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("RungOf(%q) (-want +got):\n%s", in, d)
		}
	}
}
