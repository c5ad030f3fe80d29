package templates

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/ibkube/ibkube/webhook/config"
	"github.com/ibkube/ibkube/webhook/mutate"
)

func on() *config.Config {
	c := config.Default()
	c.AlignedClaims.Enabled = true
	return c
}

// summary is an action as "op namespace/name".
func summary(plan []Action) []string {
	out := make([]string, len(plan))
	for i, a := range plan {
		out[i] = string(a.Op) + " " + a.Template.Namespace + "/" + a.Template.Name
	}
	return out
}

func desired(t *testing.T, ns string) []*resourceapi.ResourceClaimTemplate {
	t.Helper()
	d, err := Desired(on(), ns)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestPlan(t *testing.T) {
	t.Parallel()
	shapes := mutate.AlignedShapes(on())
	team := desired(t, "team")
	changed := desired(t, "team")
	changed[0].Spec.Spec.Devices.Requests = changed[0].Spec.Spec.Devices.Requests[1:]
	foreign := desired(t, "gone")[0]

	cases := []struct {
		name     string
		cfg      *config.Config
		optedIn  []string
		existing []*resourceapi.ResourceClaimTemplate
		want     []string
	}{
		{"in place: nothing to do", on(), []string{"team"}, team, []string{}},
		{"feature off: every template goes", config.Default(), []string{"team"}, team[:2],
			[]string{"delete team/" + team[0].Name, "delete team/" + team[1].Name}},
		{"namespace left injection", on(), nil, []*resourceapi.ResourceClaimTemplate{foreign}, []string{"delete gone/" + foreign.Name}},
		{"a changed spec is replaced", on(), []string{"team"}, changed, []string{"replace team/" + team[0].Name}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			plan, err := Plan(tc.cfg, tc.optedIn, tc.existing)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, summary(plan)); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("new namespace gets every kept shape", func(t *testing.T) {
		t.Parallel()
		plan, err := Plan(on(), []string{"new"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(plan) != len(shapes) || len(shapes) == 0 {
			t.Fatalf("%d actions for %d shapes", len(plan), len(shapes))
		}
		for i, a := range plan {
			if a.Op != Create || a.Template.Name != shapes[i].Name() || a.Template.Labels[LabelManagedBy] != Manager {
				t.Errorf("action %d = %s %s %v, want create %s labelled", i, a.Op, a.Template.Name, a.Template.Labels, shapes[i].Name())
			}
		}
	})
}
