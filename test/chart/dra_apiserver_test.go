//go:build integration

package chart

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/internal/testing/charttest"
	"github.com/ibkube/ibkube/internal/testing/testenv"
	"github.com/ibkube/ibkube/node/dra"
)

// The DeviceClasses of the DRA render, created (dry-run) on a real API
// server with its default gates, keep extendedResourceName: the field
// DRAExtendedResource guards, which a server with the gate off drops
// silently. Their CEL selectors compile there too.
func TestAPIServerDRADeviceClasses(t *testing.T) {
	cfg, _ := startEnv(t)
	cs := testenv.Clientset(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := render(t, renderCase{name: "dra"}.args()...)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, o := range decodeAll(t, out) {
		if o.GetKind() != "DeviceClass" {
			continue
		}
		n++
		var dc resourceapi.DeviceClass
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &dc); err != nil {
			t.Fatal(err)
		}
		got, err := cs.ResourceV1().DeviceClasses().Create(ctx, &dc, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			t.Errorf("DeviceClass %s refused: %v", dc.Name, err)
			continue
		}
		if got.Spec.ExtendedResourceName == nil || *got.Spec.ExtendedResourceName != *dc.Spec.ExtendedResourceName {
			t.Errorf("DeviceClass %s: the API server kept extendedResourceName %v, the chart set %s", dc.Name, got.Spec.ExtendedResourceName, *dc.Spec.ExtendedResourceName)
		}
	}
	if n != 3 {
		t.Errorf("the dra render has %d DeviceClasses, want 3", n)
	}
}

// On a cluster that does not serve resource.k8s.io/v1 (switched off with
// --runtime-config), helm install with node.allocation=dra fails naming the
// API, and the default install renders nothing of DRA.
func TestAPIServerHelmInstallWithoutDRA(t *testing.T) {
	env := &envtest.Environment{}
	env.ControlPlane.GetAPIServer().Configure().Append("runtime-config", "resource.k8s.io/v1=false")
	cfg := testenv.StartEnv(t, "test-chart-apiserver", env)
	cs := testenv.Clientset(t, cfg)
	groups, err := cs.Discovery().ServerGroups()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups.Groups {
		if g.Name == "resource.k8s.io" {
			t.Fatalf("the API server still serves resource.k8s.io (%v): the case would prove nothing", g.Versions)
		}
	}
	kubeconfig := adminKubeconfig(t, env)
	install := func(set ...string) (string, error) {
		args := []string{"install", release, charttest.ChartDir(), "--namespace", namespace, "--create-namespace", "--dry-run=server", "--kubeconfig", kubeconfig}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		return helm(t, args...)
	}
	_, err = install("node.allocation=dra")
	if err == nil || !strings.Contains(err.Error(), "resource.k8s.io/v1") {
		t.Errorf("install with node.allocation=dra: error %v, want one naming resource.k8s.io/v1", err)
	}
	out, err := install()
	if err != nil {
		t.Fatal(err)
	}
	for _, unwanted := range []string{"kind: DeviceClass", "name: ibkube-node-agent-dra", "key: infiniband.azure.com/allocation"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("default install on a cluster without DRA renders %q", unwanted)
		}
	}
}

// The DRA agent's ServiceAccount, installed from manifests/ibkube.yaml, can
// run the agent's startup gate check (dry-run creates) against a real API
// server with its default gates, and keep its node's ResourceSlice; the
// device-plugin agent's cannot touch ResourceSlices.
func TestAPIServerDRARBAC(t *testing.T) {
	cfg := startAPIServer(t)
	c := newCluster(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c.installManifests(ctx, t)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "nd-0"}}
	if _, err := c.cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	agent := testenv.Clientset(t, impersonate(cfg, namespace, "ibkube-node-agent-dra"))
	if err := dra.CheckGates(ctx, agent.ResourceV1().DeviceClasses(), agent.ResourceV1().ResourceSlices(), "nd-0", true); err != nil {
		t.Errorf("the DRA agent's gate check as its ServiceAccount: %v", err)
	}
	slice := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "nd-0-" + contract.DRADriverName},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: contract.DRADriverName, NodeName: ptr.To("nd-0"),
			Pool:    resourceapi.ResourcePool{Name: "nd-0", ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{Name: "ib-mlx5-0"}},
		},
	}
	got, err := agent.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the DRA agent creates its node's ResourceSlice: %v", err)
	}
	got.Spec.Pool.Generation++
	if _, err := agent.ResourceV1().ResourceSlices().Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Errorf("update: %v", err)
	}
	if _, err := agent.ResourceV1().ResourceClaims("default").Get(ctx, "none", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get a claim: %v, want not found (allowed)", err)
	}
	dp := testenv.Clientset(t, impersonate(cfg, namespace, "ibkube-node-agent"))
	if err := dp.ResourceV1().ResourceSlices().Delete(ctx, got.Name, metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the device-plugin agent deletes a ResourceSlice: %v, want forbidden", err)
	}
	if err := agent.ResourceV1().ResourceSlices().Delete(ctx, got.Name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("delete: %v", err)
	}
}
