package policy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	celconfig "k8s.io/apiserver/pkg/apis/cel"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/webhook/mutate"
	"github.com/ibkube/ibkube/webhook/policy"
	"github.com/ibkube/ibkube/webhook/policy/corpus"
	"github.com/ibkube/ibkube/webhook/policy/policytest"
)

// TestCostWithinBudget admits a 16-container pod and checks the CEL cost
// the API server charges stays below its per-expression limit (the
// smallest budget that applies; a policy over it fails the admission). The
// figure is logged for docs/admission-policy.md.
func TestCostWithinBudget(t *testing.T) {
	t.Parallel()
	objs, err := policy.Render(corpus.Configs()["default"], testNames)
	if err != nil {
		t.Fatal(err)
	}
	s := mustServer(t, objs)
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

// BenchmarkPolicy16Containers reports the CEL cost of one admission of a
// 16-container pod, and the time the API server's evaluator takes.
func BenchmarkPolicy16Containers(b *testing.B) {
	objs, err := policy.Render(corpus.Configs()["default"], testNames)
	if err != nil {
		b.Fatal(err)
	}
	s := mustServer(b, objs)
	pod := policytest.WidePod(16)
	var got policytest.Admitted
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
