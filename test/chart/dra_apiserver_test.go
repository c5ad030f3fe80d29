//go:build integration

package chart

import (
	"context"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
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
	cfg := testenv.StartEnv(t, "test-integration-chart", env)
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
	kubeconfig := testenv.AdminKubeconfig(t, env, "helm-admin")
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
// device-plugin agent's cannot touch ResourceSlices. The agent acts with the
// node-name extra a bound token of a pod on nd-0 carries.
func TestAPIServerDRARBAC(t *testing.T) {
	cfg, _, ctx := installedWithNodes(t, nil, "nd-0", "nd-1")
	agent := testenv.Clientset(t, onNode(impersonate(cfg, namespace, "ibkube-node-agent-dra"), "nd-0"))
	waitForAgentPolicy(ctx, t, agent)
	if err := dra.CheckGates(ctx, agent.ResourceV1().DeviceClasses(), agent.ResourceV1().ResourceSlices(), "nd-0", true); err != nil {
		t.Errorf("the DRA agent's gate check as its ServiceAccount: %v", err)
	}
	got, err := agent.ResourceV1().ResourceSlices().Create(ctx, nodeSlice("nd-0"), metav1.CreateOptions{})
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

// The DRA agent cannot write another node's ResourceSlices nor create,
// change or delete real DeviceClasses, whatever its RBAC allows: the
// chart's ValidatingAdmissionPolicies refuse it. A token without a node
// (not a pod's bound token) writes no slice at all. An administrator is
// not affected.
func TestAPIServerDRAAgentLeastAuthority(t *testing.T) {
	cfg, c, ctx := installedWithNodes(t, nil, "nd-0", "nd-1")
	sa := impersonate(cfg, namespace, "ibkube-node-agent-dra")
	agent := testenv.Clientset(t, onNode(sa, "nd-0"))
	waitForAgentPolicy(ctx, t, agent)

	refused := func(what string, err error, want string) {
		t.Helper()
		if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) || err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want a refusal saying %q", what, err, want)
		}
	}
	_, err := agent.ResourceV1().ResourceSlices().Create(ctx, nodeSlice("nd-1"), metav1.CreateOptions{})
	refused("the agent on nd-0 creates nd-1's slice", err, "may not write the ResourceSlices of node nd-1")
	_, err = agent.ResourceV1().ResourceSlices().Create(ctx, nodeSlice("nd-1"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	refused("the agent on nd-0 dry-runs nd-1's slice", err, "nd-1")
	allNodes := nodeSlice("nd-0")
	allNodes.Name, allNodes.Spec.NodeName, allNodes.Spec.AllNodes = "all-"+contract.DRADriverName, nil, ptr.To(true)
	_, err = agent.ResourceV1().ResourceSlices().Create(ctx, allNodes, metav1.CreateOptions{})
	refused("the agent creates a slice for all nodes", err, "ResourceSlices of no single node")

	// nd-1's own slice, written by the administrator: the agent on nd-0
	// may neither change nor delete it.
	other, err := c.cs.ResourceV1().ResourceSlices().Create(ctx, nodeSlice("nd-1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the administrator creates nd-1's slice: %v", err)
	}
	other.Spec.Devices = nil
	_, err = agent.ResourceV1().ResourceSlices().Update(ctx, other, metav1.UpdateOptions{})
	refused("the agent on nd-0 empties nd-1's slice", err, "nd-1")
	err = agent.ResourceV1().ResourceSlices().Delete(ctx, other.Name, metav1.DeleteOptions{})
	refused("the agent on nd-0 deletes nd-1's slice", err, "nd-1")

	// The node's own slices of another driver (a GPU driver's) are not
	// the agent's to write either.
	gpu := nodeSlice("nd-0")
	gpu.Name, gpu.Spec.Driver = "nd-0-gpu.example.com", "gpu.example.com"
	_, err = agent.ResourceV1().ResourceSlices().Create(ctx, gpu, metav1.CreateOptions{})
	refused("the agent on nd-0 creates nd-0's slice of another driver", err, "may write only ResourceSlices of driver "+contract.DRADriverName+", not gpu.example.com")
	if _, err := agent.ResourceV1().ResourceSlices().Create(ctx, nodeSlice("nd-0"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("the agent on nd-0 dry-runs its own slice: %v", err)
	}

	noNode := testenv.Clientset(t, sa)
	_, err = noNode.ResourceV1().ResourceSlices().Create(ctx, nodeSlice("nd-0"), metav1.CreateOptions{})
	refused("the agent's ServiceAccount without a node claim creates a slice", err, "names no node")

	// DeviceClasses: only the gate check's dry run.
	class := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: "takeover"},
		Spec:       resourceapi.DeviceClassSpec{ExtendedResourceName: ptr.To("rdma/ib")},
	}
	if _, err := agent.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("the agent's dry-run DeviceClass create (its gate check): %v", err)
	}
	_, err = agent.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{})
	refused("the agent creates a real DeviceClass taking rdma/ib", err, "only as a server-side dry run")
	if _, err := c.cs.ResourceV1().DeviceClasses().Get(ctx, class.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after the refusal the class exists: %v", err)
	}

	// The administrator is not matched.
	if err := c.cs.ResourceV1().ResourceSlices().Delete(ctx, other.Name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("the administrator deletes nd-1's slice: %v", err)
	}
}

// onNode gives an impersonated ServiceAccount the node-name extra that a
// bound token of a pod on node carries (ServiceAccountTokenPodNodeInfo).
func onNode(cfg *rest.Config, node string) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Impersonate.Extra = map[string][]string{"authentication.kubernetes.io/node-name": {node}}
	return c
}

func nodeSlice(node string) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-" + contract.DRADriverName},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: contract.DRADriverName, NodeName: ptr.To(node),
			Pool:    resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{Name: "ib-mlx5-0"}},
		},
	}
}

// waitForAgentPolicy waits until the API server enforces the chart's agent
// policies (a new policy takes effect once the API server's informer has
// it): a dry-run write of another node's slice is refused.
func waitForAgentPolicy(ctx context.Context, t *testing.T, agent kubernetes.Interface) {
	t.Helper()
	probe := nodeSlice("nd-1")
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := agent.ResourceV1().ResourceSlices().Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy"), nil
	})
	if err != nil {
		t.Fatalf("the chart's ValidatingAdmissionPolicy never refused the DRA agent writing another node's slice: %v", err)
	}
}
