package policy_test

import (
	"context"
	"errors"
	"flag"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/internal/testing/corpus"
	"github.com/ibkube/ibkube/internal/testing/policytest"
	"github.com/ibkube/ibkube/webhook/multus"
	"github.com/ibkube/ibkube/webhook/mutate"
)

var randomNetworks = flag.Int("random-networks", 2_000, "random JSON networks values TestRandomNetworks admits through both sides (docs/admission-policy.md records a run of 10,000)")

// TestRandomNetworks admits pods whose JSON networks values are drawn at
// random (corpus.RandomNetworks: wrong-typed fields, empty names, elements
// that are no objects, known names nested where any type goes) through
// the policies and through webhook/mutate: each is refused by both or
// admitted by both as the same pod. Refusal texts differ by design
// (docs/admission-policy.md, known differences).
func TestRandomNetworks(t *testing.T) {
	t.Parallel()
	cfg := corpus.Configs()["default"]
	s := defaultServer(t)
	ns := optedInNS()
	base := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "train", Image: "x",
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}}}}}}
	base.Name, base.Namespace = "p", ns.Name
	var refused, differ int
	for i, v := range corpus.RandomNetworks(29, *randomNetworks) {
		pod := base.DeepCopy()
		pod.Annotations = map[string]string{contract.AnnotationMode: "ipoib", multus.Annotation: v}
		want := pod.DeepCopy()
		_, merr := mutate.Mutate(want, ns, cfg)
		var r *mutate.Refusal
		if merr != nil && !errors.As(merr, &r) {
			t.Fatalf("value %d %s: Mutate: %v", i, v, merr)
		}
		got, err := s.Admit(context.Background(), pod, ns)
		if err != nil {
			t.Fatalf("value %d %s: policy: %v", i, v, err)
		}
		switch {
		case r != nil && got.Refusal != "":
			refused++
		case r != nil:
			differ++
			t.Errorf("value %d %s: webhook refuses (%s); policy admits", i, v, r.Msg)
		case got.Refusal != "":
			differ++
			t.Errorf("value %d %s: policy refuses (%s); webhook admits", i, v, got.Refusal)
		default:
			if diff := cmp.Diff(policytest.AsJSON(t, want), policytest.AsJSON(t, got.Pod)); diff != "" {
				differ++
				t.Errorf("value %d %s: admitted pod differs (-webhook +policy):\n%s", i, v, diff)
			}
		}
		if differ >= 20 {
			t.Fatalf("stopped after %d differences in %d values", differ, i+1)
		}
	}
	t.Logf("%d random JSON networks values: %d refused by both, %d differences", *randomNetworks, refused, differ)
}
