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
// the pod's HCAs and the GPU requests its GPUs, and every HCA is joined to
// one GPU's first two rungs, by pcieRoot and numaNode.
func TestEveryHCAIsPaired(t *testing.T) {
	t.Parallel()
	for gpus := 1; gpus < 32; gpus++ {
		for hcas := 1; hcas <= MaxHCAs && gpus+hcas <= 32; hcas++ {
			s := Shape{GPUs: gpus, HCAs: hcas, GPUClass: "g", HCAClass: "h"}
			spec, err := Spec(s)
			if err != nil {
				t.Fatalf("%+v: %v", s, err)
			}
			var gotGPUs, gotHCAs int64
			for _, r := range spec.Devices.Requests {
				switch {
				case len(r.FirstAvailable) == 3:
					gotGPUs += r.FirstAvailable[0].Count
				case r.Exactly.DeviceClassName == "g":
					gotGPUs += r.Exactly.Count
				default:
					gotHCAs += r.Exactly.Count
				}
			}
			if gotGPUs != int64(gpus) || gotHCAs != int64(hcas) {
				t.Errorf("%+v: the claim asks %d GPUs and %d HCAs", s, gotGPUs, gotHCAs)
			}
			joined := map[string][]string{}
			for _, c := range spec.Devices.Constraints {
				joined[c.Requests[1]] = append(joined[c.Requests[1]], string(*c.MatchAttribute)+" with "+c.Requests[0])
			}
			if len(joined) != hcas {
				t.Errorf("%+v: constraints join %d HCAs, want %d", s, len(joined), hcas)
			}
			for hca, with := range joined {
				pair, _ := contract.AlignedPairOf(hca)
				gpu := GPURequest(pair)
				want := []string{"resource.kubernetes.io/pcieRoot with " + gpu + "/pcie-root", "resource.kubernetes.io/numaNode with " + gpu + "/numa-node"}
				if d := cmp.Diff(want, with); d != "" {
					t.Errorf("%+v: %s's constraints (-want +got):\n%s", s, hca, d)
				}
			}
			if len(spec.Devices.Requests) > 32 || len(spec.Devices.Constraints) > 32 {
				t.Errorf("%+v: %d requests, %d constraints; the API takes 32 of each", s, len(spec.Devices.Requests), len(spec.Devices.Constraints))
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
		{Shape{GPUs: 0, HCAs: 1, GPUClass: "g", HCAClass: "h"}, "0 GPUs; accepted: at least 1"},
		{Shape{GPUs: 8, HCAs: 0, GPUClass: "g", HCAClass: "h"}, "0 HCAs; accepted: 1 to 16"},
		{Shape{GPUs: 8, HCAs: 17, GPUClass: "g", HCAClass: "h"}, "17 HCAs; accepted: 1 to 16"},
		{Shape{GPUs: 20, HCAs: 16, GPUClass: "g", HCAClass: "h"}, "36 devices; accepted: at most 32"},
		{Shape{GPUs: 8, HCAs: 8, HCAClass: "h"}, `GPU class "", HCA class "h"; accepted: both`},
	} {
		if _, err := Spec(tc.shape); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Spec(%+v) = %v, want an error containing %q", tc.shape, err, tc.want)
		}
	}
}

// TestRequestNamesReadBack: the names the claim gives its requests are
// those the node agent reads back from the allocation results
// (contract.AlignedRungOf, AlignedPairOf), for every pair, HCA and rung.
func TestRequestNamesReadBack(t *testing.T) {
	t.Parallel()
	for pair := range MaxHCAs {
		for _, rung := range contract.Rungs() {
			if p, r, ok := contract.AlignedRungOf(GPURequest(pair) + "/" + rung); !ok || p != pair || r != rung {
				t.Errorf("%s/%s reads back as pair %d rung %q (%v)", GPURequest(pair), rung, p, r, ok)
			}
		}
		for j := range 2 {
			if p, ok := contract.AlignedPairOf(HCARequest(pair, j)); !ok || p != pair {
				t.Errorf("%s reads back as pair %d (%v)", HCARequest(pair, j), p, ok)
			}
		}
	}
}
