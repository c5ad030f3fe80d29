//go:build chart

package chart

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/internal/testing/charttest"
	"github.com/ibkube/ibkube/internal/testing/errtest"
)

// The chart spells the agent's names out (templates cannot import Go);
// these tests hold them to contract/dra.go.
const (
	allocLabel = contract.AllocationNodeLabel
	dpAgent    = "ibkube-node-agent"
	draAgent   = "ibkube-node-agent-dra"
)

// draRender renders the chart for a Kubernetes version with --set values and
// returns its objects by kind/name.
func draRender(t *testing.T, kube string, set ...string) (map[string]*unstructured.Unstructured, error) {
	t.Helper()
	args := []string{"template", release, charttest.ChartDir(), "--namespace", namespace, "--kube-version", kube}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := helm(t, args...)
	if err != nil {
		return nil, err
	}
	m := map[string]*unstructured.Unstructured{}
	for _, o := range decodeAll(t, out) {
		m[o.GetKind()+"/"+o.GetName()] = o
	}
	return m, nil
}

func typed[T any](t *testing.T, m map[string]*unstructured.Unstructured, key string) *T {
	t.Helper()
	o, ok := m[key]
	if !ok {
		t.Fatalf("render has no %s", key)
	}
	raw, err := json.Marshal(o.Object)
	if err != nil {
		t.Fatal(err)
	}
	v := new(T)
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return v
}

// allocationTerms returns, per required node selector term, the expression
// on the allocation label ("" when a term has none).
func allocationTerms(ds *appsv1.DaemonSet) []string {
	a := ds.Spec.Template.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	var out []string
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		e := ""
		for _, x := range term.MatchExpressions {
			if x.Key == allocLabel {
				e = string(x.Operator) + " " + strings.Join(x.Values, ",")
			}
		}
		out = append(out, e)
	}
	return out
}

// The node label splits the nodes between the two agents: unlabelled nodes
// run the chart's default, a label overrides it, and no node can match both
// DaemonSets (NotIn X and In X are disjoint).
func TestDRALabelSplit(t *testing.T) {
	for _, tc := range []struct {
		name       string
		set        []string
		dp, dra    string
		draRunsDef bool
	}{
		{name: "default deviceplugin", dp: "NotIn dra", dra: "In dra"},
		{name: "default dra", set: []string{"node.allocation=dra"}, dp: "In deviceplugin", dra: "NotIn deviceplugin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, err := draRender(t, "1.37.2", tc.set...)
			if err != nil {
				t.Fatal(err)
			}
			dp := typed[appsv1.DaemonSet](t, m, "DaemonSet/"+dpAgent)
			dra := typed[appsv1.DaemonSet](t, m, "DaemonSet/"+draAgent)
			// The chart's default affinity has two terms (NFD label, Azure
			// VM sizes): the label expression is in each.
			if d := cmp.Diff([]string{tc.dp, tc.dp}, allocationTerms(dp)); d != "" {
				t.Errorf("device-plugin agent's allocation expressions (-want +got):\n%s", d)
			}
			if d := cmp.Diff([]string{tc.dra, tc.dra}, allocationTerms(dra)); d != "" {
				t.Errorf("DRA agent's allocation expressions (-want +got):\n%s", d)
			}
			if got := dra.Spec.Selector.MatchLabels[allocLabel]; got != "dra" {
				t.Errorf("DRA DaemonSet selector %v lacks %s=dra: it would select the device-plugin agent's pods", dra.Spec.Selector.MatchLabels, allocLabel)
			}
			if _, ok := dp.Spec.Selector.MatchLabels[allocLabel]; ok {
				t.Errorf("device-plugin DaemonSet selector %v changed: a DaemonSet's selector is immutable, upgrades would fail", dp.Spec.Selector.MatchLabels)
			}
			for _, ds := range []*appsv1.DaemonSet{dp, dra} {
				if ds.Spec.Template.Labels["app.kubernetes.io/component"] != "node-agent" {
					t.Errorf("%s pods lack component node-agent: the metrics Service would miss them", ds.Name)
				}
			}
		})
	}
}

// A user's own affinity keeps its terms; each gets the label expression.
func TestDRAAffinityMergesUserTerms(t *testing.T) {
	t.Parallel()
	m, err := draRender(t, "1.37.2",
		"agent.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=pool",
		"agent.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=In",
		"agent.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values[0]=gpu")
	if err != nil {
		t.Fatal(err)
	}
	dra := typed[appsv1.DaemonSet](t, m, "DaemonSet/"+draAgent)
	terms := dra.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	want := []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: "pool", Operator: corev1.NodeSelectorOpIn, Values: []string{"gpu"}},
		{Key: allocLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{"dra"}},
	}}}
	if d := cmp.Diff(want, terms); d != "" {
		t.Errorf("DRA agent's node selector terms (-want +got):\n%s", d)
	}
	// Without any affinity the label still splits the nodes.
	m, err = draRender(t, "1.37.2", "agent.affinity=null")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"NotIn dra"}, allocationTerms(typed[appsv1.DaemonSet](t, m, "DaemonSet/"+dpAgent))); d != "" {
		t.Errorf("device-plugin agent with affinity null (-want +got):\n%s", d)
	}
}

// The DRA agent runs the kubelet plugin: its flags, the kubelet's plugin
// directories and the CDI directory, and never the device-plugin socket
// directory; the device-plugin agent the other way round.
func TestDRAAgentMounts(t *testing.T) {
	t.Parallel()
	m, err := draRender(t, "1.37.2", "node.dra.cdiDir=/run/cdi")
	if err != nil {
		t.Fatal(err)
	}
	paths := func(ds *appsv1.DaemonSet) map[string]bool {
		out := map[string]bool{}
		for _, v := range ds.Spec.Template.Spec.Volumes {
			if v.HostPath != nil {
				out[v.HostPath.Path] = true
			}
		}
		return out
	}
	dra := typed[appsv1.DaemonSet](t, m, "DaemonSet/"+draAgent)
	dp := typed[appsv1.DaemonSet](t, m, "DaemonSet/"+dpAgent)
	for _, p := range []string{"/var/lib/kubelet/plugins/" + contract.DRADriverName, "/var/lib/kubelet/plugins_registry", "/run/cdi"} {
		if !paths(dra)[p] {
			t.Errorf("DRA agent does not mount %s (has %v)", p, paths(dra))
		}
		if paths(dp)[p] {
			t.Errorf("device-plugin agent mounts %s", p)
		}
	}
	if paths(dra)["/var/lib/kubelet/device-plugins"] {
		t.Errorf("DRA agent mounts the device-plugin directory: it must never register a device plugin")
	}
	args := strings.Join(dra.Spec.Template.Spec.Containers[0].Args, " ")
	for _, w := range []string{"--allocation=" + contract.AllocationDRA, "--cdi-dir=/run/cdi", "--kubelet-plugin-dir=/var/lib/kubelet/plugins/" + contract.DRADriverName, "--kubelet-registry-dir=/var/lib/kubelet/plugins_registry"} {
		if !strings.Contains(args, w) {
			t.Errorf("DRA agent args %q lack %s", args, w)
		}
	}
	if strings.Contains(args, "--kubelet-socket-dir") {
		t.Errorf("DRA agent args %q carry the device-plugin socket directory", args)
	}
	if got := dra.Spec.Template.Spec.ServiceAccountName; got != draAgent {
		t.Errorf("DRA agent runs as %q, want its own service account %s", got, draAgent)
	}
	// Only the DRA agent's role may write ResourceSlices.
	role := typed[rbacv1.ClusterRole](t, m, "ClusterRole/"+draAgent)
	found := false
	for _, r := range role.Rules {
		if strings.Contains(strings.Join(r.Resources, ","), "resourceslices") {
			found = true
			if d := cmp.Diff([]string{"get", "list", "watch", "create", "update", "patch", "delete"}, r.Verbs); d != "" {
				t.Errorf("resourceslices verbs (-want +got):\n%s", d)
			}
		}
	}
	if !found {
		t.Errorf("DRA agent's ClusterRole has no resourceslices rule")
	}
	for _, r := range typed[rbacv1.ClusterRole](t, m, "ClusterRole/"+dpAgent).Rules {
		if strings.Contains(strings.Join(r.APIGroups, ","), "resource.k8s.io") {
			t.Errorf("device-plugin agent's ClusterRole has a resource.k8s.io rule: %+v", r)
		}
	}
}

// One DeviceClass per pool, named and selected by the pool's resource name,
// with extendedResourceName so rdma/ib: N pods are served by DRA.
func TestDRADeviceClasses(t *testing.T) {
	t.Parallel()
	m, err := draRender(t, "1.37.2",
		"agent.config.pools[0].resourceName=rdma/ib", "agent.config.pools[0].mode=exclusive",
		"agent.config.pools[1].resourceName=rdma/shared_ib", "agent.config.pools[1].mode=shared",
		"agent.config.pools[2].resourceName=rdma/roce", "agent.config.pools[2].mode=exclusive")
	if err != nil {
		t.Fatal(err)
	}
	for name, res := range map[string]string{
		contract.DeviceClassIB:       contract.ExtendedResourceIB,
		contract.DeviceClassSharedIB: contract.ExtendedResourceSharedIB,
		contract.DeviceClassRoCE:     contract.ExtendedResourceRoCE,
	} {
		dc := typed[resourceapi.DeviceClass](t, m, "DeviceClass/"+name)
		if dc.Spec.ExtendedResourceName == nil || *dc.Spec.ExtendedResourceName != res {
			t.Errorf("%s extendedResourceName %v, want %s", name, dc.Spec.ExtendedResourceName, res)
		}
		want := contract.DeviceClassSelector(res)
		if len(dc.Spec.Selectors) != 1 || dc.Spec.Selectors[0].CEL == nil || dc.Spec.Selectors[0].CEL.Expression != want {
			t.Errorf("%s selectors %+v, want one CEL %s", name, dc.Spec.Selectors, want)
		}
	}
	// Default pools follow rdmaResources.
	m, err = draRender(t, "1.37.2", "rdmaResources.exclusive=example.com/hca")
	if err != nil {
		t.Fatal(err)
	}
	typed[resourceapi.DeviceClass](t, m, "DeviceClass/ibkube-example-com-hca")
	typed[resourceapi.DeviceClass](t, m, "DeviceClass/ibkube-rdma-shared-ib")
}

// DRA where the cluster cannot run it: asked for, the render fails naming
// what is missing; not asked for, nothing of DRA is rendered and the
// device-plugin agent is as before.
func TestDRAOnOldClusters(t *testing.T) {
	for _, tc := range []struct {
		name, kube string
		set        []string
		wantErr    []string
		wantDRA    bool
	}{
		{name: "1.35 asked", kube: "1.35.4", set: []string{"node.allocation=dra"}, wantErr: []string{"1.36", "1.35.4", "DRAExtendedResource"}},
		{name: "1.35 forced", kube: "1.35.4", set: []string{"node.dra.enabled=true"}, wantErr: []string{"1.36"}},
		{name: "contradiction", kube: "1.37.2", set: []string{"node.allocation=dra", "node.dra.enabled=false"}, wantErr: []string{"node.dra.enabled is false"}},
		{name: "1.35 default", kube: "1.35.4"},
		{name: "1.37 off", kube: "1.37.2", set: []string{"node.dra.enabled=false"}},
		{name: "1.36 default", kube: "1.36.0", wantDRA: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, err := draRender(t, tc.kube, tc.set...)
			if tc.wantErr != nil {
				errtest.Names(t, err, tc.wantErr...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			_, hasDS := m["DaemonSet/"+draAgent]
			_, hasClass := m["DeviceClass/ibkube-rdma-ib"]
			if hasDS != tc.wantDRA || hasClass != tc.wantDRA {
				t.Errorf("DRA DaemonSet %t, DeviceClass %t; want %t", hasDS, hasClass, tc.wantDRA)
			}
			dp := typed[appsv1.DaemonSet](t, m, "DaemonSet/"+dpAgent)
			if !tc.wantDRA && strings.Join(allocationTerms(dp), "") != "" {
				t.Errorf("without DRA the device-plugin agent still splits nodes by %s: %v", allocLabel, allocationTerms(dp))
			}
		})
	}
}
