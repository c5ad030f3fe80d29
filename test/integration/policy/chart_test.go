//go:build chart || integration

package policy

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/ibkube/ibkube/webhook/config"
	"github.com/ibkube/ibkube/webhook/policy"
)

// TestChartMatchesRenderer renders the chart twice with the same values:
// in webhook mode, to read the WebhookConfig it gives the webhook, and in
// policy mode. The policies and parameters of the second must be what
// webhook/policy renders from the first: the chart cannot drift from the
// Go side, and the values mean the same in both modes.
func TestChartMatchesRenderer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		set  []string
	}{
		{"defaults", nil},
		{"site", []string{
			"--set", "rdmaResources.shared=rdma/rdma_shared_device_a", "--set", "rdmaResources.exclusive=rdma/hca",
			"--set", "webhook.config.gpuResource=amd.com/gpu", "--set", "webhook.config.defaultHCAs=2",
			"--set", "webhook.config.capabilityPolicy=never", "--set", "webhook.config.defaultProfile=ndv5",
			"--set", "webhook.config.ipoib.namespace=net", "--set", "webhook.config.ipoib.interface=ib0",
			"--set", "networks.ipoib.name=fabric", "--set", "webhook.config.memlock=128Gi",
			"--set", "webhook.excludeNamespaces={monitoring,ci}", "--set", "agent.nri.enabled=false",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hooked := decode(t, helmTemplate(t, tc.set...))
			cm := hooked[key("ConfigMap", release+"-webhook-config")]
			if cm == nil {
				t.Fatal("webhook mode renders no webhook ConfigMap")
			}
			data, _, _ := unstructured.NestedString(cm.Object, "data", "webhook.yaml")
			cfg, err := config.Parse([]byte(data))
			if err != nil {
				t.Fatalf("the chart's WebhookConfig: %v", err)
			}
			cfg.ReleaseNamespace = namespace
			names := policy.Names{Prefix: release, Namespace: namespace, Version: chartAppVersion(t)}
			if tc.name == "site" {
				names.ExcludeNamespaces = []string{"monitoring", "ci"}
			}
			want, err := policy.Render(cfg, names)
			if err != nil {
				t.Fatal(err)
			}

			got := decode(t, helmTemplate(t, append(tc.set, "--set", "admission.mode=policy")...))
			for k := range got {
				if k == key("Deployment", release+"-webhook") || k == key("MutatingWebhookConfiguration", release) {
					t.Errorf("policy mode still renders %s", k)
				}
			}
			for _, w := range []struct {
				kind, name, field string
				obj               any
			}{
				{"ConfigMap", want.Params.Name, "data", want.Params},
				{"MutatingAdmissionPolicy", want.Mutating.Name, "spec", want.Mutating},
				{"MutatingAdmissionPolicyBinding", want.MutatingBinding.Name, "spec", want.MutatingBinding},
				{"ValidatingAdmissionPolicy", want.Validating.Name, "spec", want.Validating},
				{"ValidatingAdmissionPolicyBinding", want.ValidatingBinding.Name, "spec", want.ValidatingBinding},
			} {
				g := got[key(w.kind, w.name)]
				if g == nil {
					t.Errorf("policy mode renders no %s %s", w.kind, w.name)
					continue
				}
				wantU, err := runtime.DefaultUnstructuredConverter.ToUnstructured(w.obj)
				if err != nil {
					t.Fatal(err)
				}
				// Through YAML, so both sides hold the same Go types.
				var wantM, gotM map[string]any
				roundTrip(t, wantU[w.field], &wantM)
				roundTrip(t, g.Object[w.field], &gotM)
				if diff := cmp.Diff(wantM, gotM); diff != "" {
					t.Errorf("%s %s %s differs (-Go renderer +chart):\n%s", w.kind, w.name, w.field, diff)
				}
			}
			if g := got[key("ConfigMap", want.Params.Name)]; g != nil && g.GetNamespace() != namespace {
				t.Errorf("parameter ConfigMap in namespace %q, want %q", g.GetNamespace(), namespace)
			}
		})
	}
}

// TestChartRefusesUserProfilesInPolicyMode: the chart cannot resolve user
// profiles (bases, overrides) itself, so it says how to get them instead of
// silently dropping them.
func TestChartRefusesUserProfilesInPolicyMode(t *testing.T) {
	t.Parallel()
	_, err := helmTemplateErr(t, "--set", "admission.mode=policy", "--set", "webhook.config.profiles[0].name=site", "--set", "webhook.config.profiles[0].base=ndv5")
	if err == nil || !strings.Contains(err.Error(), "ibkube policy --config") {
		t.Errorf("err = %v, want a refusal naming `ibkube policy --config`", err)
	}
}

func roundTrip(t *testing.T, in any, out any) {
	t.Helper()
	b, err := yaml.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
}
