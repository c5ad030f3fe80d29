package policy_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ibkube/ibkube/nccl"
	"github.com/ibkube/ibkube/webhook/config"
	"github.com/ibkube/ibkube/webhook/policy"
)

// TestParams pins the parameter ConfigMap's format, which the policies'
// CEL reads: the IPoIB network in both annotation forms, and a profile's
// NCCL conf lines rendered for each case, after the lines ibkube writes
// first (a profile's own NCCL_NET left out after NCCL_NET=IB), the
// whole-node values only for a whole-node pod and named in a comment
// otherwise.
func TestParams(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(`apiVersion: ibkube.io/v1alpha1
kind: WebhookConfig
ipoib: {name: fabric, namespace: net, interface: ib0}
profiles:
- name: site
  nccl: {NCCL_DEBUG: WARN, NCCL_NET: Socket}
  wholeNodeNCCL: {NCCL_NET_GDR_LEVEL: SYS}
  env: {UCX_TLS: rc}
  gpusPerNode: 8
  hcasPerGPU: 2
  exclusiveResource: rdma/roce
`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := policy.Params(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"ipoibCSV":                     "net/fabric@ib0",
		"ipoibJSON":                    `{"name":"fabric","namespace":"net","interface":"ib0"}`,
		"profile.site.conf.rdma.whole": "NCCL_DEBUG=WARN\nNCCL_NET=Socket\nNCCL_NET_GDR_LEVEL=SYS\n",
		"profile.site.conf.rdma-closed.partial": "NCCL_DEBUG=WARN\n" +
			"# Left out, as this pod does not hold all 8 GPUs of the machine (GPU/HCA pairing unknown): NCCL_NET_GDR_LEVEL (SYS)\n",
		"profile.site.env":               "UCX_TLS=rc\n",
		"profile.site.gpusPerNode":       "8",
		"profile.site.hcasPerGPU":        "2",
		"profile.site.exclusiveResource": "rdma/roce",
		"profile.site.gpuResource":       "",
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s = %q, want %q", k, got[k], w)
		}
	}
	if _, ok := got["profile."+nccl.GenericIB+".gpusPerNode"]; !ok {
		t.Errorf("built-in profile %s missing from the parameters", nccl.GenericIB)
	}
}

func TestRenderNeedsNames(t *testing.T) {
	t.Parallel()
	for _, n := range []policy.Names{{Namespace: "x"}, {Prefix: "x"}} {
		if _, err := policy.Render(config.Default(), n); err == nil {
			t.Errorf("Render(%+v) = nil error, want one naming the missing prefix or namespace", n)
		}
	}
	objs, err := policy.Render(config.Default(), policy.Names{Prefix: "p", Namespace: "ns", ExcludeNamespaces: []string{"ci"}})
	if err != nil {
		t.Fatal(err)
	}
	got := objs.MutatingBinding.Spec.MatchResources.NamespaceSelector.MatchExpressions[0].Values
	if diff := cmp.Diff([]string{"ns", "kube-system", "ci"}, got); diff != "" {
		t.Errorf("excluded namespaces (-want +got):\n%s", diff)
	}
}

// TestRenderRefusesAlignedClaims: the policies cannot keep the aligned
// claim's templates, so a config asking for it is refused rather than
// rendered into policies that silently keep extended resources.
func TestRenderRefusesAlignedClaims(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.AlignedClaims.Enabled = true
	_, err := policy.Render(cfg, policy.Names{Prefix: "p", Namespace: "ns"})
	if !errors.Is(err, policy.ErrAlignedClaims) {
		t.Fatalf("Render = %v, want ErrAlignedClaims", err)
	}
}
