//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/test/e2e/fakegpu"
)

// DRA mode (docs/dra.md) on the same node, after the device-plugin
// scenarios: the node moves to the DRA agent by its label, pods are served
// by ResourceSlices, DeviceClasses and CDI, and it moves back.
const (
	draDriver      = contract.DRADriverName
	allocLabel     = contract.AllocationNodeLabel
	draAgentDS     = "ibkube-node-agent-dra"
	dpAgentDS      = "ibkube-node-agent"
	classIB        = contract.DeviceClassIB
	classSharedIB  = contract.DeviceClassSharedIB
	cdiDir         = "/var/run/cdi"
	draNS          = "e2e-dra"
	draClaimNS     = "e2e-dra-claims"
	draSwitchLimit = 3 * time.Minute
	// throughputPods is how many pods each scheduling-throughput setup creates.
	throughputPods = 40
)

// draState carries what the DRA scenarios established to the later ones.
type draState struct {
	on  bool   // the node runs the DRA agent and its slices are published
	why string // why not, for SKIP lines
	// Device-plugin figures of this run, for the ratios.
	dpPodStart, dpSchedRate float64
}

// scenario starts a DRA scenario that needs the node on DRA (skipped,
// saying why, when it is not) and returns its result and a context that
// ends with it or after within.
func (d *draState) scenario(t *testing.T, name string, within time.Duration) (*Result, context.Context) {
	t.Helper()
	r := h.scenario(t, name)
	if !d.on {
		skip(t, r, "%s", d.why)
	}
	return r, ctxT(t, within)
}

// draCapable says why the agent binary cannot run in DRA mode, or "".
func draCapable(ctx context.Context) string {
	out, _ := run(ctx, filepath.Join(h.bin, "ibkube-node-agent"), "-h")
	if !strings.Contains(out, "-allocation") {
		return "cmd/ibkube-node-agent has no --allocation flag (the DRA driver is not built in)"
	}
	return ""
}

// label sets (or, with "", removes) the node's allocation label.
func labelAllocation(ctx context.Context, value string) error {
	arg := allocLabel + "=" + value
	if value == "" {
		arg = allocLabel + "-"
	}
	_, err := h.kubectlRun(ctx, "label", "node", nodeName, "--overwrite", arg)
	return err
}

// agentOn waits until the named agent DaemonSet has a Ready pod on the node
// and the other has none.
func agentOn(ctx context.Context, ds, other string, timeout time.Duration) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		pods, err := h.cs.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=node-agent"})
		if err != nil {
			return false, nil
		}
		ready, others := false, 0
		for _, p := range pods.Items {
			owner := ""
			if ref := metav1.GetControllerOf(&p); ref != nil {
				owner = ref.Name
			}
			switch owner {
			case ds:
				ready = ready || (p.DeletionTimestamp == nil && podReady(&p))
			case other:
				others++
			}
		}
		last = fmt.Sprintf("%s ready %t, %s pods %d", ds, ready, other, others)
		return ready && others == 0, nil
	})
	if err != nil {
		return fmt.Errorf("agent %s not alone on the node: %w (%s)", ds, err, last)
	}
	return nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// draDevices returns the node's devices of ibkube's driver by name.
func draDevices(ctx context.Context) (map[string]resourceapi.Device, error) {
	return driverDevices(ctx, draDriver)
}

// driverDevices returns the node's devices of a DRA driver by name, from
// its ResourceSlices.
func driverDevices(ctx context.Context, driver string) (map[string]resourceapi.Device, error) {
	list, err := h.cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
		FieldSelector: "spec.nodeName=" + nodeName + ",spec.driver=" + driver,
	})
	if err != nil {
		return nil, err
	}
	out := map[string]resourceapi.Device{}
	for _, s := range list.Items {
		for _, d := range s.Spec.Devices {
			out[d.Name] = d
		}
	}
	return out, nil
}

// devAttr reads a device attribute by its name in the driver's domain (a
// slice may write it qualified or not) or a qualified standard name.
func devAttr(d resourceapi.Device, name string) (resourceapi.DeviceAttribute, bool) {
	if a, ok := d.Attributes[resourceapi.QualifiedName(name)]; ok {
		return a, true
	}
	a, ok := d.Attributes[resourceapi.QualifiedName(draDriver+"/"+name)]
	return a, ok
}

func devString(d resourceapi.Device, name string) string {
	if a, ok := devAttr(d, name); ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}

func devInt(d resourceapi.Device, name string) int64 {
	if a, ok := devAttr(d, name); ok && a.IntValue != nil {
		return *a.IntValue
	}
	return -1
}

// poolDevices are the devices of one pool (its resource name).
func poolDevices(devs map[string]resourceapi.Device, pool string) []resourceapi.Device {
	var out []resourceapi.Device
	for _, d := range devs {
		if devString(d, contract.DRAAttrPool) == pool {
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// waitPool waits until the pool has want devices, returning them.
func waitPool(ctx context.Context, pool string, want int, timeout time.Duration) ([]resourceapi.Device, error) {
	var got []resourceapi.Device
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		devs, err := draDevices(ctx)
		if err != nil {
			return false, nil
		}
		got = poolDevices(devs, pool)
		return len(got) == want, nil
	})
	if err != nil {
		return got, fmt.Errorf("pool %s of %s on %s has %d devices, want %d: %w", pool, draDriver, nodeName, len(got), want, err)
	}
	return got, nil
}

// podClaims are the names of the ResourceClaims a pod holds: the one the
// scheduler made for its extended resources and those of its templates.
func podClaims(p *corev1.Pod) []string {
	var out []string
	if s := p.Status.ExtendedResourceClaimStatus; s != nil {
		out = append(out, s.ResourceClaimName)
	}
	for _, s := range p.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			out = append(out, *s.ResourceClaimName)
		}
	}
	return out
}

// allocated returns the devices of ibkube's driver allocated to a pod's
// claims, and the claims' UIDs.
func allocated(ctx context.Context, p *corev1.Pod) (devices []string, uids []string, err error) {
	for _, name := range podClaims(p) {
		c, err := h.cs.ResourceV1().ResourceClaims(p.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, nil, fmt.Errorf("claim %s of pod %s: %w", name, p.Name, err)
		}
		uids = append(uids, string(c.UID))
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver == draDriver {
				devices = append(devices, r.Device)
			}
		}
	}
	sort.Strings(devices)
	return devices, uids, nil
}

// freeHCAs are the HCAs (RDMA device names) of the rdma/ib pool that no
// ResourceClaim in the cluster holds exclusively, sorted.
func freeHCAs(ctx context.Context) ([]string, error) {
	devs, err := draDevices(ctx)
	if err != nil {
		return nil, err
	}
	claims, err := h.cs.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	held := map[string]bool{}
	for _, c := range claims.Items {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if d, ok := devs[r.Device]; ok && r.Driver == draDriver && devString(d, contract.DRAAttrPool) == string(exclusiveRes) {
				held[devString(d, contract.DRAAttrRDMADevice)] = true
			}
		}
	}
	var out []string
	for _, d := range poolDevices(devs, string(exclusiveRes)) {
		if n := devString(d, contract.DRAAttrRDMADevice); !held[n] {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}

// cdiFiles are the CDI spec files naming a claim UID.
func cdiFiles(uid string) []string {
	m, _ := filepath.Glob(filepath.Join(cdiDir, "*"+uid+"*"))
	return m
}

// uverbsHCAs maps the container's uverbs devices to their HCAs through the
// fixture's sysfs, sorted.
func uverbsHCAs(rep ContainerReport) ([]string, error) {
	var out []string
	for _, d := range rep.Devices {
		if !strings.Contains(d.Path, "uverbs") {
			continue
		}
		ibdev, err := os.ReadFile(filepath.Join(fixture.SysfsRoot(fixtureDir), "class/infiniband_verbs", filepath.Base(d.Path), "ibdev"))
		if err != nil {
			return nil, fmt.Errorf("%s has no ibdev in the fixture: %w", d.Path, err)
		}
		out = append(out, strings.TrimSpace(string(ibdev)))
	}
	sort.Strings(out)
	return out, nil
}

// hcaNUMA is an HCA's NUMA node as the fixture's sysfs has it.
func hcaNUMA(hca string) (int64, error) {
	raw, err := os.ReadFile(filepath.Join(fixture.SysfsRoot(fixtureDir), "class/infiniband", hca, "device/numa_node"))
	if err != nil {
		return -1, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
}

// claimPod is a report pod that holds the claims of the named templates.
func claimPod(name string, templates ...string) *corev1.Pod {
	p := reportPod(name, nil)
	for _, tpl := range templates {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: tpl, ResourceClaimTemplateName: ptr.To(tpl)})
		p.Spec.Containers[0].Resources.Claims = append(p.Spec.Containers[0].Resources.Claims, corev1.ResourceClaim{Name: tpl})
	}
	return p
}

// claimTemplate is a ResourceClaimTemplate with requests of exactly count
// devices of a class, each narrowed by an optional CEL selector, and
// constraints.
type draRequest struct {
	name, class, cel string
	count            int64
}

func claimTemplate(name string, reqs []draRequest, constraints ...resourceapi.DeviceConstraint) *resourceapi.ResourceClaimTemplate {
	tpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, r := range reqs {
		ex := &resourceapi.ExactDeviceRequest{DeviceClassName: r.class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: r.count}
		if r.cel != "" {
			ex.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: r.cel}}}
		}
		tpl.Spec.Spec.Devices.Requests = append(tpl.Spec.Spec.Devices.Requests, resourceapi.DeviceRequest{Name: r.name, Exactly: ex})
	}
	tpl.Spec.Spec.Devices.Constraints = constraints
	return tpl
}

// oneHCATemplate is a claim template for the one named HCA from a class
// (exclusive or shared), picked by its rdmaDevice attribute.
func oneHCATemplate(name, class, hca string) *resourceapi.ResourceClaimTemplate {
	sel := fmt.Sprintf(`device.attributes[%q].rdmaDevice == %q`, draDriver, hca)
	return claimTemplate(name, []draRequest{{name: "hca", class: class, cel: sel, count: 1}})
}

// needFreeHCAs returns the HCAs no exclusive claim holds, sorted, or fails
// the scenario when there is none.
func needFreeHCAs(ctx context.Context, t *testing.T, r *Result) []string {
	t.Helper()
	free, err := freeHCAs(ctx)
	if err != nil || len(free) == 0 {
		fail(t, r, "no HCA free of exclusive claims: %v %v", free, err)
	}
	return free
}

// switchAllocation labels the node for an allocation ("dra",
// "deviceplugin") and waits until that allocation's agent DaemonSet (ds)
// alone runs on it.
func switchAllocation(ctx context.Context, value, ds, other string) error {
	if err := labelAllocation(ctx, value); err != nil {
		return fmt.Errorf("label the node %s=%s: %w", allocLabel, value, err)
	}
	return agentOn(ctx, ds, other, draSwitchLimit)
}

// restartDRAAgent deletes the node's DRA agent pod and waits for the
// DaemonSet's new one to be Ready.
func restartDRAAgent(ctx context.Context) error {
	if out, err := h.kubectlRun(ctx, "-n", releaseNS, "delete", "pod", "-l", allocLabel+"=dra", "--wait=true"); err != nil {
		return fmt.Errorf("delete the DRA agent: %w %s", err, out)
	}
	return agentOn(ctx, draAgentDS, dpAgentDS, 2*time.Minute)
}

func createTemplates(ctx context.Context, ns string, tpls ...*resourceapi.ResourceClaimTemplate) error {
	for _, tpl := range tpls {
		_ = h.cs.ResourceV1().ResourceClaimTemplates(ns).Delete(ctx, tpl.Name, metav1.DeleteOptions{})
		if _, err := h.cs.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tpl, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create ResourceClaimTemplate %s: %w", tpl.Name, err)
		}
	}
	return nil
}

// startPods creates pods and returns how long each took to run, in order.
func startPods(ctx context.Context, ns string, pods ...*corev1.Pod) ([]float64, error) {
	start := time.Now()
	for _, p := range pods {
		if _, err := h.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("create pod %s: %w", p.Name, err)
		}
	}
	var out []float64
	for _, p := range pods {
		if _, err := h.waitRunning(ctx, ns, p.Name, podStartTimeout); err != nil {
			return nil, err
		}
		out = append(out, time.Since(start).Seconds())
	}
	return out, nil
}

// deletePodsNow deletes pods and waits until they are gone.
func deletePodsNow(ctx context.Context, ns string, names ...string) error {
	for _, n := range names {
		_ = h.cs.CoreV1().Pods(ns).Delete(ctx, n, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	}
	return wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, n := range names {
			if _, err := h.cs.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	})
}

// exclusivePod is scenario 2's rdma-exclusive pod: the webhook asks rdma/ib: n.
func exclusivePod(name string, n int) *corev1.Pod {
	return reportPod(name, map[string]string{prefix + "mode": "rdma-exclusive", prefix + "hcas": strconv.Itoa(n)})
}

// 9a: with the device-plugin agent still serving the node, the figures DRA
// is compared with: an rdma/ib: 2 pod's start and the scheduling rate of
// rdma/shared_ib pods. Then the node is relabelled dra while that pod runs.
func testDRAMigrate(t *testing.T, st *state, d *draState) {
	r := h.scenario(t, "9a-dra-migrate-to-dra")
	st.needAgent(t, r)
	ctx := ctxT(t, 10*time.Minute)
	if why := draCapable(ctx); why != "" {
		d.why = why
		skip(t, r, "%s", why)
	}
	if _, err := h.cs.ResourceV1().DeviceClasses().Get(ctx, classIB, metav1.GetOptions{}); err != nil {
		d.why = "the chart rendered no DeviceClass " + classIB
		fail(t, r, "DeviceClass %s: %v (resource.k8s.io/v1 served on %s?)", classIB, err, h.kubeVersion)
	}
	optedIn(ctx, t, draNS, true)
	// Device plugin: the pod start figure (the same pod runs on DRA in 9b).
	times, err := startPods(ctx, draNS, exclusivePod("dp-two", 2))
	if err != nil {
		fail(t, r, "device-plugin pod: %v", err)
	}
	d.dpPodStart = times[0]
	r.Figures["deviceplugin_pod_start_seconds"] = d.dpPodStart
	// Device plugin: scheduling rate.
	rate, err := schedulingRate(ctx, draNS, "dp-sched", func(name string) *corev1.Pod {
		p := reportPod(name, nil)
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{sharedRes: resource.MustParse("1")}
		return p
	})
	if err != nil {
		fail(t, r, "device-plugin scheduling rate: %v", err)
	}
	d.dpSchedRate = rate
	r.Figures["deviceplugin_pods_scheduled_per_second"] = rate
	before := needPod(ctx, t, r, "dp-two")
	// The switch.
	start := time.Now()
	if err := switchAllocation(ctx, "dra", draAgentDS, dpAgentDS); err != nil {
		logs, _ := h.kubectlRun(ctx, "-n", releaseNS, "logs", "ds/"+draAgentDS, "--tail=30")
		d.why = "the DRA agent did not take the node"
		fail(t, r, "%v\n%s", err, logs)
	}
	devs, err := waitPool(ctx, string(exclusiveRes), fixtureIBHCAs, draSwitchLimit)
	if err != nil {
		d.why = "the DRA agent published no rdma/ib pool"
		fail(t, r, "%v", err)
	}
	r.Figures["switch_to_dra_seconds"] = time.Since(start).Seconds()
	// The device plugin is gone: allocatable rdma/ib drops to 0 (the
	// kubelet keeps the name until its grace period ends, which the
	// scheduler reads as "served by DRA").
	n, err := h.waitAllocatable(ctx, exclusiveRes, 2*time.Minute, func(v int64) bool { return v == 0 })
	check(t, r, err == nil, "allocatable %s is %d after the switch, want 0", exclusiveRes, n)
	// Each device carries the attributes the DeviceClasses and claims use.
	for _, dev := range devs {
		check(t, r, devString(dev, contract.DRAAttrLinkLayer) == "InfiniBand", "device %s linkLayer %q, want InfiniBand", dev.Name, devString(dev, contract.DRAAttrLinkLayer))
		check(t, r, devInt(dev, contract.DRAAttrRate) == 400, "device %s rate %d, want 400 (Gb/s, the fixture's NDR)", dev.Name, devInt(dev, contract.DRAAttrRate))
		numa := devInt(dev, "resource.kubernetes.io/numaNode")
		want, _ := hcaNUMA(devString(dev, contract.DRAAttrRDMADevice))
		check(t, r, numa == want, "device %s numaNode %d, the fixture has %d for %s", dev.Name, numa, want, devString(dev, contract.DRAAttrRDMADevice))
		check(t, r, devString(dev, "resource.kubernetes.io/pciBusID") != "", "device %s has no pciBusID", dev.Name)
	}
	// The running pod is left alone.
	ok, now := untouched(ctx, before)
	check(t, r, ok, "the device-plugin pod did not keep running untouched across the switch: %s", now)
	d.on = true
}

// needPod is the pod name in draNS that an earlier scenario left, or fails
// the scenario.
func needPod(ctx context.Context, t *testing.T, r *Result, name string) *corev1.Pod {
	t.Helper()
	pod, err := h.cs.CoreV1().Pods(draNS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		fail(t, r, "the pod %s an earlier scenario left: %v", name, err)
	}
	return pod
}

// untouched says whether the pod before still runs its same containers,
// never restarted, and describes it as it is now.
func untouched(ctx context.Context, before *corev1.Pod) (bool, string) {
	after, err := h.cs.CoreV1().Pods(before.Namespace).Get(ctx, before.Name, metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	return after.Status.Phase == corev1.PodRunning && sameContainers(before, after), podWhy(after)
}

// sameContainers says whether a pod's containers are the same ones, never restarted.
func sameContainers(a, b *corev1.Pod) bool {
	if a == nil || b == nil || len(a.Status.ContainerStatuses) != len(b.Status.ContainerStatuses) {
		return false
	}
	for i, c := range a.Status.ContainerStatuses {
		o := b.Status.ContainerStatuses[i]
		if c.ContainerID != o.ContainerID || o.RestartCount != 0 {
			return false
		}
	}
	return true
}

// schedulingRate creates throughputPods pods that cannot start (their image
// is never pulled), by 8 clients at once, and returns pods bound per second
// from the first creation to the last binding seen (the namespace's pods
// listed every 50 ms); then deletes them.
func schedulingRate(ctx context.Context, ns, prefix string, mk func(string) *corev1.Pod) (float64, error) {
	names := make([]string, throughputPods)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%02d", prefix, i)
	}
	defer func() { _ = deletePodsNow(context.Background(), ns, names...) }()
	start := time.Now()
	errs := make(chan error, throughputPods)
	work := make(chan string)
	for c := 0; c < 8; c++ {
		go func() {
			for name := range work {
				p := mk(name)
				p.Spec.Containers[0].Image = "docker.io/library/ibkube-never-pulled:none"
				_, err := h.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
				errs <- err
			}
		}()
	}
	go func() {
		for _, n := range names {
			work <- n
		}
		close(work)
	}()
	for range names {
		if err := <-errs; err != nil {
			return 0, fmt.Errorf("create: %w", err)
		}
	}
	bound := map[string]bool{}
	var last time.Time
	// 40 pods bound in 4–6 s on a quiet machine (the slowest, DRA with
	// matchAttribute, 6.5/s); the bound only ends a run that never finishes.
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := h.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, p := range list.Items {
			if strings.HasPrefix(p.Name, prefix+"-") && p.Spec.NodeName != "" && !bound[p.Name] {
				bound[p.Name] = true
				last = time.Now()
			}
		}
		return len(bound) == throughputPods, nil
	})
	if err != nil {
		return 0, fmt.Errorf("%d of %d pods bound: %w", len(bound), throughputPods, err)
	}
	return round3(float64(throughputPods) / last.Sub(start).Seconds()), nil
}

// 9b: the same rdma/ib: 2 pod under DRA (the scheduler's claim through the
// DeviceClass's extendedResourceName): exactly two HCAs' devices, matching
// NCCL_IB_HCA, memlock raised for uid 1000 under Pod Security baseline.
func testDRAExtendedResource(t *testing.T, st *state, d *draState) {
	r, ctx := d.scenario(t, "9b-dra-extended-resource", 5*time.Minute)
	times, err := startPods(ctx, draNS, exclusivePod("dra-two", 2))
	if err != nil {
		fail(t, r, "%v", err)
	}
	r.Figures["dra_pod_start_seconds"] = times[0]
	if d.dpPodStart > 0 {
		r.Figures["dra_vs_deviceplugin_pod_start_ratio"] = round3(times[0] / d.dpPodStart)
	}
	pod := needPod(ctx, t, r, "dra-two")
	check(t, r, pod.Status.ExtendedResourceClaimStatus != nil, "pod has no extendedResourceClaimStatus: not served by DRA")
	devs, uids, err := allocated(ctx, pod)
	if err != nil {
		fail(t, r, "%v", err)
	}
	check(t, r, len(devs) == 2, "claim holds devices %v, want 2", devs)
	rep, err := h.containerReport(ctx, draNS, "dra-two", "main")
	if err != nil {
		fail(t, r, "%v", err)
	}
	hcas, err := uverbsHCAs(rep)
	check(t, r, err == nil, "%v", err)
	check(t, r, len(hcas) == 2, "container got the uverbs devices of %v, want exactly 2 HCAs (%v)", hcas, rep.devicePaths())
	all, _ := draDevices(ctx)
	var want []string
	for _, dev := range devs {
		want = append(want, devString(all[dev], contract.DRAAttrRDMADevice))
	}
	sort.Strings(want)
	check(t, r, slices.Equal(hcas, want), "container got the devices of %v, the claim allocated %v", hcas, want)
	got := hcaNames(rep.Env["NCCL_IB_HCA"])
	check(t, r, slices.Equal(got, hcas), "NCCL_IB_HCA=%q names %v, the container got %v", rep.Env["NCCL_IB_HCA"], got, hcas)
	check(t, r, rep.Memlock.Soft > runtimeMemlock, "memlock soft %d not raised above the runtime's %d (uid %d, baseline)", rep.Memlock.Soft, runtimeMemlock, rep.UID)
	check(t, r, rep.UID == 1000 && !rep.hasCap("CAP_IPC_LOCK"), "uid %d caps %v: want uid 1000 without IPC_LOCK", rep.UID, rep.Capabilities)
	for _, u := range uids {
		check(t, r, len(cdiFiles(u)) > 0, "no CDI spec for claim %s in %s", u, cdiDir)
	}
	r.Notes = append(r.Notes, fmt.Sprintf("DRA pod: NCCL_IB_HCA=%s, devices %v", rep.Env["NCCL_IB_HCA"], devs))
}

// 9c: two pods' claims for the same shared HCA both run, each with its
// share of it.
func testDRAShared(t *testing.T, st *state, d *draState) {
	r, ctx := d.scenario(t, "9c-dra-shared", 5*time.Minute)
	h.namespace(ctx, t, draClaimNS, map[string]string{"pod-security.kubernetes.io/enforce": "baseline"}, nil)
	// An HCA no exclusive claim holds (9b's pod keeps its two): a shared
	// claim on a held HCA is unschedulable, which 9j tests.
	free := needFreeHCAs(ctx, t, r)
	hca := free[len(free)-1]
	if err := createTemplates(ctx, draClaimNS, oneHCATemplate("shared-one", classSharedIB, hca)); err != nil {
		fail(t, r, "%v", err)
	}
	if _, err := startPods(ctx, draClaimNS, claimPod("share-a", "shared-one"), claimPod("share-b", "shared-one")); err != nil {
		fail(t, r, "%v", err)
	}
	for _, name := range []string{"share-a", "share-b"} {
		rep, err := h.containerReport(ctx, draClaimNS, name, "main")
		if err != nil {
			check(t, r, false, "%v", err)
			continue
		}
		hcas, _ := uverbsHCAs(rep)
		check(t, r, slices.Equal(hcas, []string{hca}), "%s got the devices of %v, want %s (shared)", name, hcas, hca)
	}
	// Later scenarios count free HCAs by exclusive claims only.
	check(t, r, deletePodsNow(ctx, draClaimNS, "share-a", "share-b") == nil, "shared pods did not go away")
}

// 9d: a claim selecting by attribute (InfiniBand, at least 400 Gb/s) gets a
// device that has them; one asking 800 Gb/s stays pending.
func testDRAAttributes(t *testing.T, st *state, d *draState) {
	r, ctx := d.scenario(t, "9d-dra-attribute-claim", 5*time.Minute)
	sel := func(rate int) string {
		return fmt.Sprintf(`device.attributes[%q].linkLayer == "InfiniBand" && device.attributes[%q].rate >= %d`, draDriver, draDriver, rate)
	}
	if err := createTemplates(ctx, draClaimNS,
		claimTemplate("ib-400", []draRequest{{name: "hca", class: classIB, cel: sel(400), count: 1}}),
		claimTemplate("ib-800", []draRequest{{name: "hca", class: classIB, cel: sel(800), count: 1}})); err != nil {
		fail(t, r, "%v", err)
	}
	if _, err := startPods(ctx, draClaimNS, claimPod("ib-400", "ib-400")); err != nil {
		fail(t, r, "%v", err)
	}
	pod, _ := h.cs.CoreV1().Pods(draClaimNS).Get(ctx, "ib-400", metav1.GetOptions{})
	devs, _, err := allocated(ctx, pod)
	check(t, r, err == nil && len(devs) == 1, "claim devices %v (%v), want 1", devs, err)
	all, _ := draDevices(ctx)
	for _, dev := range devs {
		check(t, r, devString(all[dev], contract.DRAAttrLinkLayer) == "InfiniBand" && devInt(all[dev], contract.DRAAttrRate) >= 400, "allocated %s is %s at %d Gb/s", dev, devString(all[dev], contract.DRAAttrLinkLayer), devInt(all[dev], contract.DRAAttrRate))
	}
	if _, err := h.cs.CoreV1().Pods(draClaimNS).Create(ctx, claimPod("ib-800", "ib-800"), metav1.CreateOptions{}); err != nil {
		fail(t, r, "%v", err)
	}
	_, err = unschedulable(ctx, draClaimNS, "ib-800", time.Minute)
	check(t, r, err == nil, "a claim for 800 Gb/s InfiniBand was not found unschedulable on a 400 Gb/s node")
	_ = deletePodsNow(ctx, draClaimNS, "ib-800", "ib-400")
}

// 9e: a port going down taints its device in the ResourceSlice and a pod
// holding it sees it Unhealthy in allocatedResourcesStatus; both recover.
func testDRAPortDown(t *testing.T, st *state, d *draState) {
	r, ctx := d.scenario(t, "9e-dra-port-down", 5*time.Minute)
	free := needFreeHCAs(ctx, t, r)
	hca := free[len(free)-1]
	if err := createTemplates(ctx, draClaimNS, oneHCATemplate("holds-one", classIB, hca)); err != nil {
		fail(t, r, "%v", err)
	}
	if _, err := startPods(ctx, draClaimNS, claimPod("holder", "holds-one")); err != nil {
		fail(t, r, "%v", err)
	}
	tainted := func(ctx context.Context) (bool, error) {
		devs, err := draDevices(ctx)
		if err != nil {
			return false, err
		}
		for _, dev := range devs {
			if devString(dev, contract.DRAAttrRDMADevice) == hca && devString(dev, contract.DRAAttrPool) == string(exclusiveRes) {
				for _, tn := range dev.Taints {
					if tn.Effect == resourceapi.DeviceTaintEffectNoSchedule {
						return true, nil
					}
				}
				return false, nil
			}
		}
		return false, fmt.Errorf("no device for %s", hca)
	}
	health := func(ctx context.Context) corev1.ResourceHealthStatus {
		p, err := h.cs.CoreV1().Pods(draClaimNS).Get(ctx, "holder", metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			return ""
		}
		for _, s := range p.Status.ContainerStatuses[0].AllocatedResourcesStatus {
			for _, res := range s.Resources {
				if strings.HasPrefix(string(res.ResourceID), draDriver+"/") {
					return res.Health
				}
			}
		}
		return ""
	}
	if err := fixture.SetPortState(fixtureDir, hca, 1, "DOWN"); err != nil {
		fail(t, r, "port down: %v", err)
	}
	start := time.Now()
	var taintAt, unhealthyAt time.Duration
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		if taintAt == 0 {
			if ok, _ := tainted(ctx); ok {
				taintAt = time.Since(start)
			}
		}
		if unhealthyAt == 0 && health(ctx) == corev1.ResourceHealthStatusUnhealthy {
			unhealthyAt = time.Since(start)
		}
		return taintAt > 0 && unhealthyAt > 0, nil
	})
	if restore := fixture.SetPortState(fixtureDir, hca, 1, "ACTIVE"); restore != nil {
		t.Errorf("port up: %v", restore)
	}
	check(t, r, taintAt > 0, "port %s/1 down: its device was not tainted NoSchedule within 90 s", hca)
	check(t, r, unhealthyAt > 0, "port %s/1 down: the holder's allocatedResourcesStatus never said Unhealthy (now %q)", hca, health(ctx))
	if err == nil {
		r.Figures["port_down_to_taint_seconds"] = taintAt.Seconds()
		r.Figures["port_down_to_pod_unhealthy_seconds"] = unhealthyAt.Seconds()
	}
	start = time.Now()
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		ok, err := tainted(ctx)
		return err == nil && !ok && health(ctx) == corev1.ResourceHealthStatusHealthy, nil
	})
	check(t, r, err == nil, "port %s/1 back up: taint or Unhealthy did not clear within 90 s (health %q)", hca, health(ctx))
	if err == nil {
		r.Figures["port_up_to_recovered_seconds"] = time.Since(start).Seconds()
	}
	check(t, r, deletePodsNow(ctx, draClaimNS, "holder") == nil, "the holder pod did not go away")
}

// 9f: the DRA agent restarts: running pods keep their devices (and their
// CDI specs), and a new pod is prepared.
func testDRAAgentRestart(t *testing.T, st *state, d *draState) {
	r, ctx := d.scenario(t, "9f-dra-agent-restart", 5*time.Minute)
	before := needPod(ctx, t, r, "dra-two")
	_, uids, _ := allocated(ctx, before)
	if err := restartDRAAgent(ctx); err != nil {
		fail(t, r, "%v", err)
	}
	if _, err := waitPool(ctx, string(exclusiveRes), fixtureIBHCAs, time.Minute); err != nil {
		fail(t, r, "%v", err)
	}
	ok, now := untouched(ctx, before)
	check(t, r, ok, "the running pod was disturbed by the agent restart: %s", now)
	for _, u := range uids {
		check(t, r, len(cdiFiles(u)) > 0, "the running pod's claim %s lost its CDI spec", u)
	}
	if _, err := startPods(ctx, draNS, exclusivePod("after-restart", 1)); err != nil {
		fail(t, r, "a pod after the restart: %v", err)
	}
	rep, err := h.containerReport(ctx, draNS, "after-restart", "main")
	if err != nil {
		fail(t, r, "%v", err)
	}
	hcas, _ := uverbsHCAs(rep)
	check(t, r, len(hcas) == 1, "pod after the restart got %v, want one HCA", hcas)
}

// 9g: deleting a pod unprepares its claim: the CDI spec is gone.
func testDRAUnprepare(t *testing.T, st *state, d *draState) {
	r, ctx := d.scenario(t, "9g-dra-unprepare", 3*time.Minute)
	pod := needPod(ctx, t, r, "after-restart")
	_, uids, _ := allocated(ctx, pod)
	if len(uids) == 0 {
		fail(t, r, "pod after-restart holds no claim")
	}
	for _, u := range uids {
		check(t, r, len(cdiFiles(u)) > 0, "claim %s has no CDI spec before deletion", u)
	}
	if err := deletePodsNow(ctx, draNS, "after-restart"); err != nil {
		fail(t, r, "%v", err)
	}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, u := range uids {
			if len(cdiFiles(u)) > 0 {
				return false, nil
			}
		}
		return true, nil
	})
	check(t, r, err == nil, "CDI specs of the deleted pod's claims %v still in %s", uids, cdiDir)
}

// 9h: a GPU and an HCA in one claim with matchAttribute numaNode land on one
// NUMA node, even when the HCAs of NUMA node 0 are all taken; scheduling
// rates of DRA claims with and without the constraint.
func testDRAAligned(t *testing.T, st *state, d *draState) {
	r, ctx := d.scenario(t, "9h-dra-gpu-hca-aligned", 8*time.Minute)
	gpus, stopGPUs := startFakeGPUs(ctx, t, r)
	defer stopGPUs()
	numa := resourceapi.FullyQualifiedName("resource.kubernetes.io/numaNode")
	aligned := claimTemplate("gpu-hca-aligned", []draRequest{{name: "gpu", class: fakegpu.DeviceClass, count: 1}, {name: "hca", class: classIB, count: 1}},
		resourceapi.DeviceConstraint{Requests: []string{"gpu", "hca"}, MatchAttribute: &numa})
	// NUMA node 0's free HCAs all taken, so only NUMA node 1 can hold an
	// aligned pair: a GPU on node 0 would be a constraint ignored.
	free, err := freeHCAs(ctx)
	if err != nil {
		fail(t, r, "%v", err)
	}
	var free0 int64
	for _, n := range free {
		if numa, _ := hcaNUMA(n); numa == 0 {
			free0++
		}
	}
	if err := createTemplates(ctx, draClaimNS, aligned); err != nil {
		fail(t, r, "%v", err)
	}
	if free0 > 0 {
		numa0 := claimTemplate("hcas-numa0", []draRequest{{name: "hca", class: classIB, count: free0,
			cel: `device.attributes["resource.kubernetes.io"].numaNode == 0`}})
		if err := createTemplates(ctx, draClaimNS, numa0); err != nil {
			fail(t, r, "%v", err)
		}
		if _, err := startPods(ctx, draClaimNS, claimPod("numa0-hcas", "hcas-numa0")); err != nil {
			fail(t, r, "pod holding NUMA node 0's %d free HCAs: %v", free0, err)
		}
	}
	if _, err := startPods(ctx, draClaimNS, claimPod("aligned", "gpu-hca-aligned")); err != nil {
		fail(t, r, "%v", err)
	}
	rep, err := h.containerReport(ctx, draClaimNS, "aligned", "main")
	if err != nil {
		fail(t, r, "%v", err)
	}
	hcas, _ := uverbsHCAs(rep)
	var gpuNUMA []int64
	for k, v := range rep.Env {
		if strings.HasPrefix(k, fakegpu.EnvPrefix) {
			for _, g := range gpus {
				if g.PCIBusID == v {
					gpuNUMA = append(gpuNUMA, g.NUMANode)
				}
			}
		}
	}
	check(t, r, len(hcas) == 1 && len(gpuNUMA) == 1, "aligned pod got HCAs %v and GPUs on NUMA %v, want one of each", hcas, gpuNUMA)
	if len(hcas) == 1 && len(gpuNUMA) == 1 {
		n, _ := hcaNUMA(hcas[0])
		check(t, r, n == gpuNUMA[0] && n == 1, "GPU on NUMA node %d, HCA %s on %d: want both on 1 (node 0's HCAs are taken)", gpuNUMA[0], hcas[0], n)
		r.Notes = append(r.Notes, fmt.Sprintf("aligned pod: GPU on NUMA %d, HCA %s on NUMA %d", gpuNUMA[0], hcas[0], n))
	}
	_ = deletePodsNow(ctx, draClaimNS, "aligned", "numa0-hcas")
	// Scheduling rates: shared-HCA claims without and with a numaNode
	// constraint (two shares on one NUMA node), against the device plugin's.
	sharedTwo := func(name string, constrained bool) *resourceapi.ResourceClaimTemplate {
		var cs []resourceapi.DeviceConstraint
		if constrained {
			cs = append(cs, resourceapi.DeviceConstraint{MatchAttribute: &numa})
		}
		return claimTemplate(name, []draRequest{{name: "a", class: classSharedIB, count: 1}, {name: "b", class: classSharedIB, count: 1}}, cs...)
	}
	if err := createTemplates(ctx, draClaimNS, sharedTwo("two-free", false), sharedTwo("two-numa", true)); err != nil {
		fail(t, r, "%v", err)
	}
	for _, c := range []struct{ tpl, figure string }{{"two-free", "dra_pods_scheduled_per_second"}, {"two-numa", "dra_numa_pods_scheduled_per_second"}} {
		rate, err := schedulingRate(ctx, draClaimNS, c.tpl, func(name string) *corev1.Pod { return claimPod(name, c.tpl) })
		if err != nil {
			check(t, r, false, "%s: %v", c.tpl, err)
			continue
		}
		r.Figures[c.figure] = rate
		if d.dpSchedRate > 0 {
			r.Figures[strings.TrimSuffix(c.figure, "_pods_scheduled_per_second")+"_vs_deviceplugin_rate_ratio"] = round3(rate / d.dpSchedRate)
		}
	}
}

// 9i: back to the device plugin by relabelling, with a DRA pod left alone.
func testDRAMigrateBack(t *testing.T, st *state, d *draState) {
	r, ctx := d.scenario(t, "9i-dra-migrate-back", 5*time.Minute)
	before := needPod(ctx, t, r, "dra-two")
	start := time.Now()
	if err := switchAllocation(ctx, "deviceplugin", dpAgentDS, draAgentDS); err != nil {
		fail(t, r, "%v", err)
	}
	n, err := h.waitAllocatable(ctx, exclusiveRes, 2*time.Minute, func(v int64) bool { return v == fixtureIBHCAs })
	if err != nil {
		fail(t, r, "allocatable %s is %d back on the device plugin, want %d", exclusiveRes, n, fixtureIBHCAs)
	}
	r.Figures["switch_to_deviceplugin_seconds"] = time.Since(start).Seconds()
	ok, now := untouched(ctx, before)
	check(t, r, ok, "the DRA pod did not keep running untouched: %s", now)
	// Nodes without the label run the chart's default (device plugin).
	if err := labelAllocation(ctx, ""); err != nil {
		check(t, r, false, "remove the label: %v", err)
	}
	d.on = false
	d.why = "the node is back on the device plugin"
}

// testDRA runs the DRA scenarios in order on one node.
func testDRA(t *testing.T, st *state) {
	d := &draState{why: "the node did not move to DRA"}
	t.Cleanup(func() {
		// Whatever happened, the node ends on the chart's default agent.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := labelAllocation(ctx, ""); err != nil {
			t.Errorf("remove the node's %s label: %v", allocLabel, err)
		}
	})
	t.Run("9a-dra-migrate-to-dra", func(t *testing.T) { testDRAMigrate(t, st, d) })
	t.Run("9b-dra-extended-resource", func(t *testing.T) { testDRAExtendedResource(t, st, d) })
	t.Run("9c-dra-shared", func(t *testing.T) { testDRAShared(t, st, d) })
	t.Run("9d-dra-attribute-claim", func(t *testing.T) { testDRAAttributes(t, st, d) })
	t.Run("9e-dra-port-down", func(t *testing.T) { testDRAPortDown(t, st, d) })
	t.Run("9f-dra-agent-restart", func(t *testing.T) { testDRAAgentRestart(t, st, d) })
	t.Run("9g-dra-unprepare", func(t *testing.T) { testDRAUnprepare(t, st, d) })
	t.Run("9h-dra-gpu-hca-aligned", func(t *testing.T) { testDRAAligned(t, st, d) })
	t.Run("9m-dra-aligned-admission", func(t *testing.T) { testDRAAlignedAdmission(t, st, d) })
	t.Run("9j-dra-exclusive-is-exclusive", func(t *testing.T) { testDRAExclusiveIsExclusive(t, st, d) })
	t.Run("9k-dra-flap-burst", func(t *testing.T) { testDRAFlapBurst(t, st, d) })
	t.Run("9l-dra-stale-cdi-spec", func(t *testing.T) { testDRAStaleCDISpec(t, st, d) })
	t.Run("9i-dra-migrate-back", func(t *testing.T) { testDRAMigrateBack(t, st, d) })
}
