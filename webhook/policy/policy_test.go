package policy_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/internal/testing/corpus"
	"github.com/ibkube/ibkube/internal/testing/policytest"
	"github.com/ibkube/ibkube/webhook/mutate"
	"github.com/ibkube/ibkube/webhook/policy"
)

var testNames = policy.Names{Prefix: "ibkube", Namespace: corpus.ReleaseNamespace}

func mustServer(t testing.TB, objs *policy.Objects) *policytest.Server {
	t.Helper()
	s, err := policytest.New(objs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// defaultServer runs the policies rendered from the corpus's default
// config.
func defaultServer(t testing.TB) *policytest.Server {
	t.Helper()
	objs, err := policy.Render(corpus.Configs()["default"], testNames)
	if err != nil {
		t.Fatal(err)
	}
	return mustServer(t, objs)
}

// TestEquivalenceInProcess admits the whole corpus through the policies
// with the API server's CEL machinery and compares each result with
// webhook/mutate's: the same pod, or the same refusal.
func TestEquivalenceInProcess(t *testing.T) {
	t.Parallel()
	cases, err := corpus.Load(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	servers := map[string]*policytest.Server{}
	for name, cfg := range corpus.Configs() {
		objs, err := policy.Render(cfg, testNames)
		if err != nil {
			t.Fatal(err)
		}
		servers[name] = mustServer(t, objs)
	}
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			want := tc.Pod.DeepCopy()
			_, merr := mutate.Mutate(want, tc.NS, corpus.Configs()[tc.Config])
			got, err := servers[tc.Config].Admit(context.Background(), tc.Pod, tc.NS)
			if err != nil {
				t.Fatalf("policy: %v", err)
			}
			var r *mutate.Refusal
			if d, ok := corpus.KnownDifferences[tc.Name]; ok && !d.APIServerOnly {
				// The table must stay true: a listed case that no longer
				// differs is taken out of it (and of the docs).
				same := (merr == nil && got.Refusal == "" && cmp.Equal(policytest.AsJSON(t, want), policytest.AsJSON(t, got.Pod))) ||
					(errors.As(merr, &r) && got.Refusal == r.Msg)
				if same {
					t.Errorf("listed as a known difference (%s) but the results are the same: remove it from corpus.KnownDifferences and docs/admission-policy.md", d.Why)
				}
				return
			}
			switch {
			case errors.As(merr, &r):
				if got.Refusal != r.Msg {
					t.Errorf("refusal\n  policy %q\n webhook %q", got.Refusal, r.Msg)
				}
			case merr != nil:
				t.Fatalf("Mutate: %v", merr)
			case got.Refusal != "":
				t.Errorf("policy refused %q; webhook admitted", got.Refusal)
			default:
				if diff := cmp.Diff(policytest.AsJSON(t, want), policytest.AsJSON(t, got.Pod)); diff != "" {
					t.Errorf("admitted pod differs (-webhook +policy):\n%s", diff)
				}
			}
		})
	}
}

// TestCorpusCoversEveryUserKey: every key a user writes (contract) has a
// corpus case the webhook admits with it and one it refuses naming it, so
// a new key cannot reach the policies without its behaviour proven equal.
func TestCorpusCoversEveryUserKey(t *testing.T) {
	t.Parallel()
	cases, err := corpus.Load(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	accepted, refused := map[string]bool{}, map[string]bool{}
	for _, tc := range cases {
		p := tc.Pod.DeepCopy()
		_, merr := mutate.Mutate(p, tc.NS, corpus.Configs()[tc.Config])
		var r *mutate.Refusal
		for _, k := range contract.UserKeys() {
			key := contract.Prefix + k
			if _, ok := tc.Pod.Annotations[key]; !ok {
				continue
			}
			switch {
			case merr == nil:
				accepted[k] = true
			case errors.As(merr, &r) && strings.Contains(r.Msg, "annotation "+key+":"):
				refused[k] = true
			}
		}
	}
	for _, k := range contract.UserKeys() {
		if !accepted[k] {
			t.Errorf("annotation %s%s: no corpus case (internal/testing/corpus) the webhook admits with it", contract.Prefix, k)
		}
		if !refused[k] {
			t.Errorf("annotation %s%s: no corpus case the webhook refuses naming it", contract.Prefix, k)
		}
	}
}
