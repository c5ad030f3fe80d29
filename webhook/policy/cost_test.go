package policy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	celconfig "k8s.io/apiserver/pkg/apis/cel"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/internal/testing/corpus"
	"github.com/ibkube/ibkube/internal/testing/policytest"
	"github.com/ibkube/ibkube/webhook/multus"
	"github.com/ibkube/ibkube/webhook/mutate"
)

// TestCostWithinBudget admits a 16-container pod and checks the CEL cost
// the API server charges stays below its per-expression limit (the
// smallest budget that applies; a policy over it fails the admission). The
// figure is logged for docs/admission-policy.md.
func TestCostWithinBudget(t *testing.T) {
	t.Parallel()
	s := defaultServer(t)
	for _, n := range []int{1, 16, mutate.MaxContainers} {
		got, err := s.Admit(context.Background(), policytest.WidePod(n), optedInNS())
		if err != nil {
			t.Fatal(err)
		}
		if got.Refusal != "" {
			t.Fatalf("%d containers: refused: %s", n, got.Refusal)
		}
		t.Logf("%d containers: mutation cost %d, refusal check cost %d (per-expression limit %d, per-policy budget %d)",
			n, got.MutateCost, got.RefuseCost, celconfig.PerCallLimit, celconfig.RuntimeCELCostBudget)
		if got.MutateCost >= celconfig.PerCallLimit || got.RefuseCost >= celconfig.PerCallLimit {
			t.Errorf("%d containers: cost %d/%d reaches the API server's per-expression limit %d", n, got.MutateCost, got.RefuseCost, celconfig.PerCallLimit)
		}
	}
	// One container over the limit is refused before the containers are
	// iterated, at a cost that does not grow with them.
	for _, n := range []int{mutate.MaxContainers + 1, 20 * mutate.MaxContainers} {
		got, err := s.Admit(context.Background(), policytest.WidePod(n), optedInNS())
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(got.Refusal, fmt.Sprintf("pod has %d containers", n)) {
			t.Errorf("%d containers: refusal %q, want the container count's", n, got.Refusal)
		}
		t.Logf("%d containers: refused, mutation cost %d, refusal check cost %d", n, got.MutateCost, got.RefuseCost)
		if got.MutateCost > 1000 || got.RefuseCost > 1000 {
			t.Errorf("%d containers: refusing cost %d/%d, want it independent of the containers (under 1000)", n, got.MutateCost, got.RefuseCost)
		}
	}
}

// TestCostIndependentOfAnnotations: a pod with 40,000 annotation keys (the
// most the API server's 256 KiB holds) costs the policies what a pod with
// none costs: passed by when it is not ibkube's, refused by its count when
// it is. Before the bound, relevance alone looked at every key.
func TestCostIndependentOfAnnotations(t *testing.T) {
	t.Parallel()
	s := defaultServer(t)
	filled := func(n int, kv ...string) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
		p.Annotations = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			p.Annotations[kv[i]] = kv[i+1]
		}
		for i := 0; len(p.Annotations) < n; i++ {
			p.Annotations[corpus.FillerKey(i)] = ""
		}
		return p
	}
	typo := contract.Prefix + "hca"
	for _, tc := range []struct {
		name, wantRefusal string
		small, large      *corev1.Pod
	}{
		{"not ibkube's", "", filled(0), filled(40_000)},
		{"not ibkube's, an unknown key under the prefix", "", filled(mutate.MaxAnnotations+1, typo, "8"), filled(40_000, typo, "8")},
		{"ibkube's", "pod has ", filled(mutate.MaxAnnotations+1, contract.AnnotationMode, "rdma-shared"), filled(40_000, contract.AnnotationMode, "rdma-shared")},
	} {
		small, err := s.Admit(context.Background(), tc.small, optedInNS())
		if err != nil {
			t.Fatal(err)
		}
		large, err := s.Admit(context.Background(), tc.large, optedInNS())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d keys cost %d+%d, %d keys %d+%d", tc.name, len(tc.small.Annotations), small.MutateCost, small.RefuseCost,
			len(tc.large.Annotations), large.MutateCost, large.RefuseCost)
		if !strings.HasPrefix(large.Refusal, tc.wantRefusal) || (tc.wantRefusal == "") != (large.Refusal == "") {
			t.Errorf("%s: refusal %q, want one starting %q", tc.name, large.Refusal, tc.wantRefusal)
		}
		// A few units for the digits of the count a message repeats.
		if large.MutateCost > small.MutateCost+16 || large.RefuseCost > small.RefuseCost+16 {
			t.Errorf("%s: 40,000 keys cost %d+%d, %d keys %d+%d: want the same within 16", tc.name, large.MutateCost, large.RefuseCost,
				len(tc.small.Annotations), small.MutateCost, small.RefuseCost)
		}
	}
}

// TestCostOfJSONNetworks: the largest JSON networks value admitted
// (mutate.MaxNetworksJSONBytes), read with the patterns of jsonnet.go,
// stays below the per-expression limit, and one byte more is refused by
// its size before any pattern runs.
func TestCostOfJSONNetworks(t *testing.T) {
	t.Parallel()
	s := defaultServer(t)
	for _, n := range []int{mutate.MaxNetworksJSONBytes, mutate.MaxNetworksJSONBytes + 1} {
		p := policytest.WidePod(16)
		p.Annotations[multus.Annotation] = corpus.JSONNetworksOfSize(n)
		got, err := s.Admit(context.Background(), p, optedInNS())
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		t.Logf("JSON networks value of %d bytes: mutation cost %d, refusal check cost %d, refusal %.60q", n, got.MutateCost, got.RefuseCost, got.Refusal)
		if refused := got.Refusal != ""; refused != (n > mutate.MaxNetworksJSONBytes) {
			t.Errorf("%d bytes: refusal %q", n, got.Refusal)
		}
		if got.MutateCost >= celconfig.PerCallLimit*3/4 || got.RefuseCost >= celconfig.PerCallLimit*3/4 {
			t.Errorf("%d bytes: cost %d/%d, over three quarters of the per-expression limit %d (the containers' cost comes on top)", n, got.MutateCost, got.RefuseCost, celconfig.PerCallLimit)
		}
	}
}

// BenchmarkPolicy16Containers reports the CEL cost of one admission of a
// 16-container pod, and the time the API server's evaluator takes.
func BenchmarkPolicy16Containers(b *testing.B) {
	benchmarkAdmit(b, policytest.WidePod(16))
}

// benchmarkAdmit admits pod through the default config's policies in a
// loop and reports the CEL cost of one admission.
func benchmarkAdmit(b *testing.B, pod *corev1.Pod) {
	s := defaultServer(b)
	var got policytest.Admitted
	var err error
	b.ReportAllocs()
	for b.Loop() {
		if got, err = s.Admit(context.Background(), pod, optedInNS()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(got.MutateCost), "mutate-cost/op")
	b.ReportMetric(float64(got.RefuseCost), "refuse-cost/op")
}

func optedInNS() mutate.Namespace {
	return mutate.Namespace{Name: "training", Labels: map[string]string{contract.LabelInject: contract.InjectEnabled}}
}

// BenchmarkPolicyVariables reports the CEL cost of each variable of the
// policies (what it adds once the variables it reads are known) for the
// 16-container pod of BenchmarkPolicy16Containers and for the fleet's
// pod (test/fleet: one container of 8 GPUs, rdma-exclusive, profile ndv5),
// so a change to the CEL can be held to the variables it touches.
func BenchmarkPolicyVariables(b *testing.B) {
	s := defaultServer(b)
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
	}{{"16containers", policytest.WidePod(16)}, {"fleet", fleetPod()}} {
		costs, err := s.VariableCosts(context.Background(), tc.pod, optedInNS())
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range costs {
			b.Run(tc.name+"/"+c.Name, func(b *testing.B) {
				for b.Loop() {
				}
				b.ReportMetric(float64(c.Cost), "cost/op")
			})
		}
	}
}

// BenchmarkPolicyFleetPod is BenchmarkPolicy16Containers for the fleet's
// pod, the pod whose admission make fleet-admission profiles.
func BenchmarkPolicyFleetPod(b *testing.B) {
	benchmarkAdmit(b, fleetPod())
}

// fleetPod is test/fleet's admitPod: a training job's GPU pod.
func fleetPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "admit", Labels: map[string]string{"app": "admit"}, Annotations: map[string]string{
			contract.AnnotationMode: contract.ModeExclusive, contract.AnnotationProfile: "ndv5",
		}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "trainer", Image: "fake", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")},
		}}}},
	}
}
