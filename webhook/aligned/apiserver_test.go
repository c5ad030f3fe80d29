//go:build integration

package aligned

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/internal/testing/testenv"
)

// TestAPIServerKeepsTheTemplate creates the templates of the largest
// shapes and of the fixtures' machines in a real kube-apiserver (envtest):
// the API's validation accepts them (subrequest names in constraints, the
// 32-request and 32-constraint bounds) and drops no field, as it would
// when a feature gate behind one is off.
func TestAPIServerKeepsTheTemplate(t *testing.T) {
	cfg, _ := testenv.Start(t, "envtest-assets")
	cs := testenv.Clientset(t, cfg)
	ctx := t.Context()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []Shape{
		{GPUs: 8, HCAs: 16, GPUClass: "gpu.nvidia.com", HCAClass: contract.DeviceClassRoCE},
		{GPUs: 8, HCAs: 8, GPUClass: "gpu.nvidia.com", HCAClass: contract.DeviceClassIB},
		{GPUs: 16, HCAs: 16, GPUClass: "gpu.nvidia.com", HCAClass: contract.DeviceClassIB},
		{GPUs: 31, HCAs: 1, GPUClass: "gpu.nvidia.com", HCAClass: contract.DeviceClassIB},
		{GPUs: 4, HCAs: 3, GPUClass: "gpu.nvidia.com", HCAClass: contract.DeviceClassIB},
	} {
		tmpl, err := Template(s, "team")
		if err != nil {
			t.Fatal(err)
		}
		got, err := cs.ResourceV1().ResourceClaimTemplates("team").Create(ctx, tmpl, metav1.CreateOptions{})
		if err != nil {
			t.Errorf("%s: %v", s.Name(), err)
			continue
		}
		if d := cmp.Diff(tmpl.Spec, got.Spec); d != "" {
			t.Errorf("%s: the API server changed the spec (-sent +stored):\n%s", s.Name(), d)
		}
	}
}
