//go:build fleet

package fleet

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/internal/testing/dratest"
)

// The reference driver of the fair DRA phase: slices of the shape
// kube-scheduler's scheduler_perf DRA tests publish (10 devices of 4
// attributes per node, dratest.RefSlice) and a class selecting them by
// driver alone (dratest.RefClass), with
// its own extended resource name, so that the same scheduler on the same
// nodes shows what DRA costs without ibkube's slices and classes.
const (
	refDriver   = "ref.example.com"
	refClass    = "ref"
	refResource = "example.com/ref"
	// refFirstDriver is the reference driver again under a name that sorts
	// before every other driver on the node, for the reference-alone
	// burst (dratest.RefFirstDriver). Its slices are gone before the
	// other bursts, so that they evaluate nothing of it.
	refFirstDriver   = dratest.RefFirstDriver
	refFirstClass    = "ref-first"
	refFirstResource = "example.com/ref-first"
	// gpuDriver is the fake GPU driver whose slices sit on the ND and OCI
	// DRA nodes during the phase's bursts (gpu.nvidia.com sorts before
	// ibkube's driver, so the allocator evaluates its devices first).
	gpuDriver  = "gpu.nvidia.com"
	gpuDevices = 8
	// sharersPerNode is how many rdma/shared_ib pods hold each shared
	// DRA node before the sharers' burst.
	sharersPerNode = 10
	sharersNS      = "fleet-sharers"
)

// draFairResult is the fair DRA phase: bursts of the same pod count on
// the same DRA nodes, with the fake GPU slices present throughout.
type draFairResult struct {
	Pods int
	// ReferenceAlone: pods requesting example.com/ref-first: 1, whose
	// driver's pool is the first on every node, before any other slice
	// of the phase is there: the least a DRA pod costs this scheduler.
	// Reference: pods requesting example.com/ref: 1 (reference slices and
	// a device.driver class); DRA: rdma/ib: 1; DRAWithSharers: rdma/ib: 1
	// after SharerPods rdma/shared_ib: 1 pods were bound.
	ReferenceAlone, Reference, DRA, DRAWithSharers throughputResult
	SharerPods                                     int
	// Pools: the agents' pools in the run (FLEET_POOLS): "default" (every
	// InfiniBand HCA shared and exclusive, so counters) or "split"
	// (mlx5_7 shared, the rest exclusive, no counters).
	Pools string
	// DRAOverReference and WithSharersOverWithout are pods/s ratios of
	// the same run (0 when a side bound nothing). Against the throughput
	// phase's bursts of the same run, on nodes with no other driver's
	// devices before the pod's own: ReferenceAloneOverDevicePlugin
	// (reference-alone / deviceplugin-extended) and
	// DRAOverReferenceAlone (dra-extended / reference-alone).
	DRAOverReference, WithSharersOverWithout              float64
	ReferenceAloneOverDevicePlugin, DRAOverReferenceAlone float64
	// SchedulerCPUPerPodMs: kube-scheduler's CPU time (user and system,
	// /proc) from each burst's first create to its last binding, over
	// the pods bound, by burst name.
	SchedulerCPUPerPodMs map[string]float64
	// SchedulerProfiles are the kube-scheduler CPU profiles of each burst
	// (FLEET_PROFILE=1), relative to the run's directory.
	SchedulerProfiles []string
}

// ratio is a's pods/s over b's, 0 when either bound nothing.
func ratio(a, b throughputResult) float64 {
	if a.PodsPerSecond == 0 || b.PodsPerSecond == 0 {
		return 0
	}
	return a.PodsPerSecond / b.PodsPerSecond
}

// refClassObject selects a reference driver's devices by driver alone
// (dratest.RefClass), under its own extended resource name.
func refClassObject(name, driver, resource string) *resourceapi.DeviceClass {
	c := dratest.RefClass(name, driver)
	c.Spec.ExtendedResourceName = ptr.To(resource)
	return c
}

// fakeSlice is one node's slice of n devices of driver, each with the
// attributes attrs(i) gives.
func fakeSlice(driver, node string, n int, attrs func(i int) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) *resourceapi.ResourceSlice {
	devs := make([]resourceapi.Device, n)
	for i := range devs {
		devs[i] = resourceapi.Device{Name: fmt.Sprintf("dev-%d", i), Attributes: attrs(i)}
	}
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-" + driver},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: driver, NodeName: ptr.To(node), Devices: devs,
			Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
		},
	}
}

// gpuSlice: 8 GPUs with the PCIe attributes a GPU driver publishes
// (resource.kubernetes.io/pcieRoot, pciBusID: the standard attribute names
// of k8s.io/dynamic-resource-allocation/deviceattribute).
func gpuSlice(node string) *resourceapi.ResourceSlice {
	return fakeSlice(gpuDriver, node, gpuDevices, func(i int) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
		return map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"resource.kubernetes.io/pcieRoot": {StringValue: ptr.To(fmt.Sprintf("pci0000:%02x", i/2))},
			"resource.kubernetes.io/pciBusID": {StringValue: ptr.To(fmt.Sprintf("0000:%02x:00.0", 0x18+i))},
			"productName":                     {StringValue: ptr.To("NVIDIA H100 80GB HBM3")},
			"index":                           {IntValue: ptr.To(int64(i))},
		}
	})
}

// hasGPUs: the machines whose nodes get the fake GPU slices.
func hasGPUs(m machine) bool { return m.fixture == fixture.NDv5 || m.fixture == fixture.OCIH100 }

// sharerPod is one rdma/shared_ib: 1 pod pinned to node.
func sharerPod(node string, i int) *corev1.Pod {
	p := withResource(basePod(fmt.Sprintf("sharer-%s-%02d", node, i), contract.AllocationDRA), contract.ExtendedResourceSharedIB, 1)
	p.Spec.NodeSelector["kubernetes.io/hostname"] = node
	return p
}

// draFairPods is the phase's burst size: the same for every burst, and
// small enough that rdma/ib still fits once sharers hold an HCA per node.
func draFairPods(want, capacity int) int { return min(want, capacity*6/10) }

// draFair: the reference-alone burst on nodes whose first pool is the
// reference driver's, then the reference, DRA and DRA-with-sharers
// bursts, in that order, with the fake GPU slices in place (see
// draFairResult).
func (f *fleet) draFair(t *testing.T) {
	w := workloads()[1] // dra-extended: rdma/ib: 1
	res := draFairResult{Pods: draFairPods(f.s.pods, f.capacity(w)), SchedulerCPUPerPodMs: map[string]float64{}, Pools: f.s.pools}
	defer func() { f.report.DRAFair = res }()
	burst := func(name string, pod func(i int) *corev1.Pod) throughputResult {
		stop := f.profileScheduler(t, "dra-fair-"+name)
		cpu0, err0 := schedulerCPU(f.s.dir)
		r := f.burst(t, workNS, res.Pods, pod)
		cpu1, err1 := schedulerCPU(f.s.dir)
		if p := stop(); p != "" {
			res.SchedulerProfiles = append(res.SchedulerProfiles, p)
		}
		if bound := r.Pods - r.Unbound; err0 == nil && err1 == nil && bound > 0 {
			res.SchedulerCPUPerPodMs[name] = float64(cpu1-cpu0) / float64(time.Millisecond) / float64(bound)
		} else if err0 != nil || err1 != nil {
			t.Logf("dra-fair %s: no scheduler CPU time: %v %v", name, err0, err1)
		}
		t.Logf("dra-fair %s: %d pods bound in %.1fs: %.1f pods/s (%d unschedulable at the end), scheduler CPU %.2f ms per pod",
			name, r.Pods, r.Seconds, r.PodsPerSecond, r.Unbound, res.SchedulerCPUPerPodMs[name])
		f.deletePods(t, workNS, "app=fleet")
		return r
	}
	f.refFirstSetup(t)
	res.ReferenceAlone = burst("reference-alone", func(i int) *corev1.Pod {
		return withResource(basePod(fmt.Sprintf("ref-first-%05d", i), contract.AllocationDRA), refFirstResource, 1)
	})
	f.removeDriver(t, refFirstDriver, refFirstClass)
	res.ReferenceAloneOverDevicePlugin = ratio(res.ReferenceAlone, f.report.Throughput["deviceplugin-extended"])
	res.DRAOverReferenceAlone = ratio(f.report.Throughput["dra-extended"], res.ReferenceAlone)
	t.Logf("dra-fair: reference alone / device plugin %.2f, DRA alone / reference alone %.2f",
		res.ReferenceAloneOverDevicePlugin, res.DRAOverReferenceAlone)

	f.draFairSetup(t)
	defer f.draFairTeardown(t)
	res.Reference = burst("reference", func(i int) *corev1.Pod {
		return withResource(basePod(fmt.Sprintf("ref-%05d", i), contract.AllocationDRA), refResource, 1)
	})
	res.DRA = burst("dra", func(i int) *corev1.Pod { return w.pod(fmt.Sprintf("dra-%05d", i)) })
	res.SharerPods = f.placeSharers(t)
	res.DRAWithSharers = burst("dra-with-sharers", func(i int) *corev1.Pod { return w.pod(fmt.Sprintf("dra-shared-%05d", i)) })
	f.deletePods(t, sharersNS, "app=fleet")
	res.DRAOverReference, res.WithSharersOverWithout = ratio(res.DRA, res.Reference), ratio(res.DRAWithSharers, res.DRA)
	t.Logf("dra-fair: DRA/reference %.2f, with/without sharers %.2f", res.DRAOverReference, res.WithSharersOverWithout)
}

// draFairSetup: the reference class, a reference slice on every DRA node,
// a fake GPU slice on the ND and OCI ones, and the sharers' namespace.
func (f *fleet) draFairSetup(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sharersNS}}
	if _, err := f.admin.CoreV1().Namespaces().Create(f.ctx, ns, metav1.CreateOptions{}); err != nil && !isExists(err) {
		t.Fatal(err)
	}
	f.addDriver(t, refClassObject(refClass, refDriver, refResource), func(n *simNode) []*resourceapi.ResourceSlice {
		slices := []*resourceapi.ResourceSlice{dratest.RefSlice(refDriver, n.name)}
		if hasGPUs(n.machine) {
			slices = append(slices, gpuSlice(n.name))
		}
		return slices
	})
}

// refFirstSetup: the reference-alone burst's class and a slice of its
// driver, first in pool order, on every DRA node.
func (f *fleet) refFirstSetup(t *testing.T) {
	f.addDriver(t, refClassObject(refFirstClass, refFirstDriver, refFirstResource), func(n *simNode) []*resourceapi.ResourceSlice {
		return []*resourceapi.ResourceSlice{dratest.RefSlice(refFirstDriver, n.name)}
	})
}

// addDriver creates class and, on every DRA node, the slices slicesOf
// gives it.
func (f *fleet) addDriver(t *testing.T, class *resourceapi.DeviceClass, slicesOf func(*simNode) []*resourceapi.ResourceSlice) {
	ctx := f.ctx
	if _, err := f.admin.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil && !isExists(err) {
		t.Fatal(err)
	}
	var dra []*simNode
	for _, n := range f.nodes {
		if n.mode == contract.AllocationDRA {
			dra = append(dra, n)
		}
	}
	parallel(t, dra, 32, func(n *simNode) error {
		for _, s := range slicesOf(n) {
			err := retryTransient(ctx, "create slice "+s.Name, 5, 2*time.Second, func() error {
				_, err := f.admin.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{})
				if isExists(err) {
					return nil
				}
				return err
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// removeDriver deletes a fake driver's slices and its class.
func (f *fleet) removeDriver(t *testing.T, driver, class string) {
	if err := f.deleteSlicesOf(driver); err != nil {
		t.Errorf("delete the %s slices: %v", driver, err)
	}
	if err := f.admin.ResourceV1().DeviceClasses().Delete(f.ctx, class, metav1.DeleteOptions{}); err != nil {
		t.Errorf("delete class %s: %v", class, err)
	}
}

// deleteSlicesOf deletes every slice of a fake driver.
func (f *fleet) deleteSlicesOf(driver string) error {
	return retryTransient(f.ctx, "delete the "+driver+" slices", 5, 5*time.Second, func() error {
		return f.admin.ResourceV1().ResourceSlices().DeleteCollection(f.ctx, metav1.DeleteOptions{},
			metav1.ListOptions{FieldSelector: "spec.driver=" + driver})
	})
}

// placeSharers binds sharersPerNode rdma/shared_ib: 1 pods on each ND DRA
// node (the machines with a shared pool) and returns how many bound.
func (f *fleet) placeSharers(t *testing.T) int {
	var nodes []string
	for _, n := range f.nodes {
		if n.mode == contract.AllocationDRA && n.machine.fixture == fixture.NDv5 {
			nodes = append(nodes, n.name)
		}
	}
	r := f.burst(t, sharersNS, len(nodes)*sharersPerNode, func(i int) *corev1.Pod {
		return sharerPod(nodes[i/sharersPerNode], i%sharersPerNode)
	})
	if r.Unbound > 0 {
		t.Errorf("sharers: %d of %d pods never bound (%v)", r.Unbound, r.Pods, r.Reasons)
	}
	return r.Pods - r.Unbound
}

// draFairTeardown removes the reference and GPU slices and the reference
// class, so that the phases after see ibkube's slices alone.
func (f *fleet) draFairTeardown(t *testing.T) {
	if err := f.deleteSlicesOf(gpuDriver); err != nil {
		t.Errorf("delete the %s slices: %v", gpuDriver, err)
	}
	f.removeDriver(t, refDriver, refClass)
}
