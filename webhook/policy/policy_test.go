package policy

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ibkube/ibkube/webhook/mutate"
	"github.com/ibkube/ibkube/webhook/policy/corpus"
)

var testNames = Names{Prefix: "ibkube", Namespace: corpus.ReleaseNamespace}

// TestEquivalenceInProcess admits the whole corpus through the policies
// with the API server's CEL machinery and compares each result with
// webhook/mutate's: the same pod, or the same refusal.
func TestEquivalenceInProcess(t *testing.T) {
	t.Parallel()
	cases, err := corpus.Load(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	servers := map[string]*apiServer{}
	for name, cfg := range corpus.Configs() {
		objs, err := Render(cfg, testNames)
		if err != nil {
			t.Fatal(err)
		}
		servers[name] = newAPIServer(t, objs)
	}
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			want := tc.Pod.DeepCopy()
			_, merr := mutate.Mutate(want, tc.NS, corpus.Configs()[tc.Config])
			got, err := servers[tc.Config].admit(context.Background(), tc.Pod, tc.NS)
			if err != nil {
				t.Fatalf("policy: %v", err)
			}
			var r *mutate.Refusal
			if why, ok := corpus.KnownDifferences[tc.Name]; ok {
				// The table must stay true: a listed case that no longer
				// differs is taken out of it (and of the docs).
				same := (merr == nil && got.refusal == "" && cmp.Equal(asJSON(t, want), asJSON(t, got.pod))) ||
					(errors.As(merr, &r) && got.refusal == r.Msg)
				if same {
					t.Errorf("listed as a known difference (%s) but the results are the same: remove it from corpus.KnownDifferences and docs/admission-policy.md", why)
				}
				return
			}
			switch {
			case errors.As(merr, &r):
				if got.refusal != r.Msg {
					t.Errorf("refusal\n  policy %q\n webhook %q", got.refusal, r.Msg)
				}
			case merr != nil:
				t.Fatalf("Mutate: %v", merr)
			case got.refusal != "":
				t.Errorf("policy refused %q; webhook admitted", got.refusal)
			default:
				if diff := cmp.Diff(asJSON(t, want), asJSON(t, got.pod)); diff != "" {
					t.Errorf("admitted pod differs (-webhook +policy):\n%s", diff)
				}
			}
		})
	}
}

// asJSON is v as the API server stores it: JSON, where an empty map and a
// missing one are the same and quantities are in canonical form.
func asJSON(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}
