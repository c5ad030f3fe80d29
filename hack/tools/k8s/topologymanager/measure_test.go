package topologymanager

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager/bitmask"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
)

var update = flag.Bool("update", false, "rewrite testdata/figures.txt")

// view is node/deviceplugin's kubelet view of a fixture
// (node/deviceplugin/testdata/topology/<fixture>.json).
type view struct {
	NUMANodes []int               `json:"numaNodes"`
	Resources map[string][]device `json:"resources"`
}

type device struct {
	ID        string `json:"id"`
	NUMA      []int  `json:"numa"`
	Unhealthy bool   `json:"unhealthy"`
}

const gpuResource = "nvidia.com/gpu"

func loadView(t *testing.T, fixture string) view {
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "node", "deviceplugin", "testdata", "topology", fixture+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var v view
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// hcaResource is the view's one exclusive HCA resource and how many of
// its devices a GPU pairs with (OCI: a dual-port NIC per GPU).
func hcaResource(v view) (string, int) {
	for r := range v.Resources {
		if r != gpuResource {
			return r, len(v.Resources[r]) / len(v.Resources[gpuResource])
		}
	}
	return "", 0
}

// provider stands in for the kubelet's device manager over the view: its
// hints are those of devicemanager's generateDeviceTopologyHints, its
// allocation takes devices on the container's affinity first, the NUMA
// node with fewer free devices first (devicemanager filterByAffinity).
type provider struct {
	store  topologymanager.Store
	view   view
	used   map[string]bool             // device ID -> taken
	placed map[string]map[string][]int // container -> resource -> NUMA node of each device
}

func (p *provider) numa(res, id string) []int {
	for _, d := range p.view.Resources[res] {
		if d.ID == id {
			return d.NUMA
		}
	}
	return nil
}

// hints follows devicemanager topology_hints.go generateDeviceTopologyHints:
// every NUMA mask with enough free devices is a hint, preferred when it is
// as narrow as the narrowest mask that could hold the request on an empty
// node (minAffinitySize counts all devices, free or not).
func (p *provider) hints(res string, request int) []topologymanager.TopologyHint {
	devs := p.view.Resources[res]
	if !slices.ContainsFunc(devs, func(d device) bool { return len(d.NUMA) > 0 }) {
		return nil // no TopologyInfo at all: no preference
	}
	minSize := len(p.view.NUMANodes)
	var out []topologymanager.TopologyHint
	bitmask.IterateBitMasks(p.view.NUMANodes, func(mask bitmask.BitMask) {
		all, free := 0, 0
		for _, d := range devs {
			if mask.AnySet(d.NUMA) {
				all++
				if !p.used[d.ID] {
					free++
				}
			}
		}
		if all >= request && mask.Count() < minSize {
			minSize = mask.Count()
		}
		if free >= request {
			out = append(out, topologymanager.TopologyHint{NUMANodeAffinity: mask})
		}
	})
	for i := range out {
		out[i].Preferred = out[i].NUMANodeAffinity.Count() == minSize
	}
	return out
}

func (p *provider) containerHints(c *v1.Container) map[string][]topologymanager.TopologyHint {
	out := map[string][]topologymanager.TopologyHint{}
	for name, q := range c.Resources.Limits {
		if _, ok := p.view.Resources[string(name)]; ok {
			out[string(name)] = p.hints(string(name), int(q.Value()))
		}
	}
	return out
}

func (p *provider) GetTopologyHints(_ klog.Logger, _ *v1.Pod, c *v1.Container, _ lifecycle.Operation) map[string][]topologymanager.TopologyHint {
	return p.containerHints(c)
}

// GetPodTopologyHints asks for the pod's sum, as devicemanager's
// getPodDeviceRequest does for app containers.
func (p *provider) GetPodTopologyHints(_ klog.Logger, pod *v1.Pod, _ lifecycle.Operation) map[string][]topologymanager.TopologyHint {
	sum := v1.Container{Resources: v1.ResourceRequirements{Limits: v1.ResourceList{}}}
	for _, c := range pod.Spec.Containers {
		for name, q := range c.Resources.Limits {
			s := sum.Resources.Limits[name]
			s.Add(q)
			sum.Resources.Limits[name] = s
		}
	}
	return p.containerHints(&sum)
}

func (p *provider) AllocatePod(klog.Logger, *v1.Pod, lifecycle.Operation) error { return nil }

func (p *provider) Allocate(_ context.Context, pod *v1.Pod, c *v1.Container, _ lifecycle.Operation) error {
	aff := p.store.GetAffinity(klog.Background(), string(pod.UID), c.Name).NUMANodeAffinity
	p.placed[c.Name] = map[string][]int{}
	for name, q := range c.Resources.Limits {
		res := string(name)
		for _, id := range p.order(res, aff)[:q.Value()] {
			p.used[id] = true
			p.placed[c.Name][res] = append(p.placed[c.Name][res], firstOr(p.numa(res, id), -1))
		}
	}
	return nil
}

// order lists the free devices of res as the device manager takes them:
// those on the affinity's NUMA nodes first, the node with fewer free
// devices first; then the rest.
func (p *provider) order(res string, aff bitmask.BitMask) []string {
	free := map[int][]string{}
	for _, d := range p.view.Resources[res] {
		if !p.used[d.ID] {
			n := firstOr(d.NUMA, -1)
			free[n] = append(free[n], d.ID)
		}
	}
	nodes := make([]int, 0, len(free))
	for n := range free {
		nodes = append(nodes, n)
	}
	in := func(n int) bool { return aff != nil && n >= 0 && aff.IsSet(n) }
	sort.Slice(nodes, func(i, j int) bool {
		a, b := nodes[i], nodes[j]
		if in(a) != in(b) {
			return in(a)
		}
		if in(a) && len(free[a]) != len(free[b]) {
			return len(free[a]) < len(free[b])
		}
		return a >= 0 && (b < 0 || a < b)
	})
	var out []string
	for _, n := range nodes {
		out = append(out, free[n]...)
	}
	return out
}

func firstOr(s []int, def int) int {
	if len(s) == 0 {
		return def
	}
	return s[0]
}

// policy is a kubelet --topology-manager-policy and -scope.
type policy struct{ name, scope string }

func (p policy) String() string {
	if p.name == "none" {
		return "none"
	}
	return p.name + "/" + p.scope
}

func policies() []policy {
	out := []policy{{"none", "container"}}
	for _, n := range []string{"best-effort", "restricted", "single-numa-node"} {
		for _, s := range []string{"container", "pod"} {
			out = append(out, policy{n, s})
		}
	}
	return out
}

// takeBusy marks the first GPU of every NUMA node and as many HCAs of that
// node as a GPU pairs with as in use: a node running one small pod per
// NUMA node.
func (p *provider) takeBusy(hcaRes string, perGPU int) {
	for _, n := range p.view.NUMANodes {
		for res, count := range map[string]int{gpuResource: 1, hcaRes: perGPU} {
			for _, d := range p.view.Resources[res] {
				if count > 0 && slices.Equal(d.NUMA, []int{n}) {
					p.used[d.ID] = true
					count--
				}
			}
		}
	}
}

// newProvider is the device manager over the view, on an empty or a busy
// node.
func newProvider(v view, busy bool) *provider {
	p := &provider{view: v, used: map[string]bool{}, placed: map[string]map[string][]int{}}
	for _, devs := range v.Resources {
		for _, d := range devs {
			// The device manager counts an unhealthy device for a hint's
			// preference (allDevices) but never hands it out.
			p.used[d.ID] = d.Unhealthy
		}
	}
	if busy {
		hcaRes, perGPU := hcaResource(v)
		p.takeBusy(hcaRes, perGPU)
	}
	return p
}

// fits is the most GPUs (with their HCAs) the node has free.
func (p *provider) fits(hcaRes string, perGPU int) int {
	free := map[string]int{}
	for res, devs := range p.view.Resources {
		for _, d := range devs {
			if !p.used[d.ID] {
				free[res]++
			}
		}
	}
	return min(free[gpuResource], free[hcaRes]/perGPU)
}

// podOf is a pod of one container per entry of gpus, each asking that many
// GPUs and perGPU HCAs for each.
func podOf(gpus []int, hcaRes string, perGPU int) *v1.Pod {
	pod := &v1.Pod{}
	pod.UID = types.UID(fmt.Sprintf("pod-%v", gpus))
	for i, n := range gpus {
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{
			Name: fmt.Sprintf("c%d", i),
			Resources: v1.ResourceRequirements{Limits: v1.ResourceList{
				gpuResource:             *resource.NewQuantity(int64(n), resource.DecimalSI),
				v1.ResourceName(hcaRes): *resource.NewQuantity(int64(n*perGPU), resource.DecimalSI),
			}},
		})
	}
	return pod
}

// admit runs the kubelet's Topology Manager with policy pol on the view
// (busy or empty) for a pod of containers; the result is "refused" or the
// NUMA nodes its GPUs landed on and the share of its HCAs that share a
// NUMA node with a GPU of their container.
func admit(t *testing.T, v view, busy bool, pol policy, containers []int) string {
	hcaRes, perGPU := hcaResource(v)
	p := newProvider(v, busy)
	topo := make([]cadvisorapi.Node, len(v.NUMANodes))
	for i, n := range v.NUMANodes {
		topo[i].Id = n
	}
	m, err := topologymanager.NewManager(klog.Background(), topo, pol.name, pol.scope, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.store = m
	m.AddHintProvider(klog.Background(), p)
	pod := podOf(containers, hcaRes, perGPU)
	if res := m.Admit(context.Background(), &lifecycle.PodAdmitAttributes{Pod: pod, Operation: lifecycle.AddOperation}); !res.Admit {
		return "refused"
	}
	if pol.name == topologymanager.PolicyNone {
		// No hint reaches the device manager: each plugin's own
		// GetPreferredAllocation picks, unaware of the other's devices.
		return "unaligned"
	}
	return p.outcome(hcaRes)
}

// outcome is "<GPUs' NUMA nodes> <aligned HCAs %>".
func (p *provider) outcome(hcaRes string) string {
	nodes := map[int]bool{}
	aligned, hcas := 0, 0
	for _, got := range p.placed {
		gpus, nics := map[int]int{}, map[int]int{}
		for _, n := range got[gpuResource] {
			gpus[n]++
			nodes[n] = true
		}
		for _, n := range got[hcaRes] {
			nics[n]++
			hcas++
		}
		for n, c := range nics {
			if n >= 0 && gpus[n] > 0 {
				aligned += c
			}
		}
	}
	var ids []string
	for n := range nodes {
		ids = append(ids, fmt.Sprint(n))
	}
	sort.Strings(ids)
	return fmt.Sprintf("%s %d%%", strings.Join(ids, ","), 100*aligned/max(hcas, 1))
}

// shapes are the pods measured: one container of n GPUs, and for even n
// two containers of n/2 (where the scope matters).
func shapes(gpus int) [][]int {
	var out [][]int
	for n := 1; n <= gpus; n++ {
		out = append(out, []int{n})
		if n%2 == 0 {
			out = append(out, []int{n / 2, n / 2})
		}
	}
	return out
}

// TestTopologyManagerFigures runs every policy on every layout and keeps
// the table in testdata/figures.txt (go test -update rewrites it).
func TestTopologyManagerFigures(t *testing.T) {
	var b strings.Builder
	for _, fixture := range []string{"ndv5", "ndv4", "oci-h100", "broken"} {
		v := loadView(t, fixture)
		hcaRes, perGPU := hcaResource(v)
		for _, busy := range []bool{false, true} {
			free := newProvider(v, busy).fits(hcaRes, perGPU)
			state := "empty node"
			if busy {
				state = "busy node (one GPU and its HCAs in use on every NUMA node)"
			}
			fmt.Fprintf(&b, "## %s, %s: GPUs + %d×%s each; cell: GPUs' NUMA nodes, %% of HCAs on a GPU's node\n", fixture, state, perGPU, hcaRes)
			fmt.Fprintf(&b, "| pod |")
			for _, pol := range policies() {
				fmt.Fprintf(&b, " %s |", pol)
			}
			fmt.Fprintf(&b, "\n|---|%s\n", strings.Repeat("---|", len(policies())))
			for _, shape := range shapes(free) {
				fmt.Fprintf(&b, "| %s |", shapeName(shape))
				for _, pol := range policies() {
					fmt.Fprintf(&b, " %s |", admit(t, v, busy, pol, shape))
				}
				b.WriteString("\n")
			}
			b.WriteString("\n")
		}
	}
	got := b.String()
	t.Log("\n" + got)
	path := filepath.Join("testdata", "figures.txt")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != got {
		t.Errorf("%s differs from this run; rerun with -update and review the diff", path)
	}
}

func shapeName(containers []int) string {
	var parts []string
	for _, n := range containers {
		parts = append(parts, fmt.Sprint(n))
	}
	return strings.Join(parts, "+") + " GPU"
}
