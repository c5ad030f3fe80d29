//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/nccl"
	"github.com/ibkube/ibkube/node/dra"
	"github.com/ibkube/ibkube/test/e2e/fakegpu"
	"github.com/ibkube/ibkube/webhook/aligned"
	"github.com/ibkube/ibkube/webhook/templates"
)

// The aligned claim in admission (docs/dra.md, "Turning it on") on the
// real scheduler: the webhook turns an annotated GPU pod's extended
// resources into the aligned claim, the webhook's controller keeps the
// claim's templates, the scheduler's allocator picks the rung and the DRA
// agent tells the container its pairs.
const (
	alignedNS = "e2e-dra-aligned"
	// numaAttr is the standard attribute both drivers publish on ND H100 v5.
	numaAttr = "resource.kubernetes.io/numaNode"
	// alignedConfigTimeout bounds a helm upgrade of the webhook's config
	// and the wait for what it turns on or off.
	alignedConfigTimeout = 3 * time.Minute
	// fellBackWithin bounds the wait for the agent's Event: it is sent at
	// Prepare, before the container starts, through an asynchronous recorder.
	fellBackWithin = time.Minute
)

// setAlignedClaims sets webhook.config.alignedClaims with helm upgrade and
// waits for the webhook's rollout: class "" turns it off.
func setAlignedClaims(ctx context.Context, class string) error {
	// Off is an explicit false: with --reuse-values, Helm 3's "--set
	// key=null" left the previous release's true in the rendered config.
	sets := []string{"--set", "webhook.config.alignedClaims.enabled=false"}
	if class != "" {
		sets = []string{"--set", "webhook.config.alignedClaims.enabled=true", "--set", "webhook.config.alignedClaims.gpuDeviceClass=" + class}
	}
	args := append([]string{"upgrade", release, filepath.Join(h.root, "charts/ibkube"), "--namespace", releaseNS, "--reuse-values"}, sets...)
	_, err := run(ctx, h.helm, append(args, "--wait", "--timeout", "3m")...)
	return err
}

// alignedPod is an annotated rdma-exclusive pod with profile ndv5 (one HCA
// per GPU) asking gpus of the GPU resource the config names.
func alignedPod(name string, gpus int64, annotated bool) *corev1.Pod {
	var annos map[string]string
	if annotated {
		annos = map[string]string{contract.AnnotationMode: contract.ModeExclusive, contract.AnnotationProfile: nccl.NDv5}
	}
	p := reportPod(name, annos)
	q := *resource.NewQuantity(gpus, resource.DecimalSI)
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{contract.ResourceGPU: q}
	return p
}

// alignedTemplate is the template admission names for n GPUs and n HCAs
// of rdma/ib (ndv5: one HCA per GPU).
func alignedTemplate(n int) string {
	return aligned.Shape{GPUs: n, HCAs: n, GPUClass: fakegpu.DeviceClass, HCAClass: classIB}.Name()
}

// waitAlignedAdmission waits until five dry-run admissions in a row of a
// 1-GPU aligned pod carry the aligned claim (want) or none (!want): every
// webhook replica then serves that config.
func waitAlignedAdmission(ctx context.Context, want bool) error {
	last, err := waitAdmission(ctx, alignedNS, alignedPod("probe", 1, true), alignedConfigTimeout, func(p *corev1.Pod) (bool, string) {
		return (len(p.Spec.ResourceClaims) > 0) == want, fmt.Sprintf("resourceClaims %v", p.Spec.ResourceClaims)
	})
	if err != nil {
		return fmt.Errorf("admission of an aligned 1-GPU pod never gave the aligned claim=%v five times in a row: %w (last: %s)", want, err, last)
	}
	return nil
}

// managedTemplates are the names of the aligned claim templates the
// webhook's controller keeps in ns ("" for every namespace).
func managedTemplates(ctx context.Context, ns string) ([]string, error) {
	l, err := h.cs.ResourceV1().ResourceClaimTemplates(ns).List(ctx, metav1.ListOptions{LabelSelector: templates.LabelManagedBy + "=" + templates.Manager})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, t := range l.Items {
		out = append(out, t.Namespace+"/"+t.Name)
	}
	sort.Strings(out)
	return out, nil
}

// waitTemplates waits until ok holds of the controller's templates in ns.
func waitTemplates(ctx context.Context, ns string, ok func([]string) bool) ([]string, error) {
	var got []string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, alignedConfigTimeout, true, func(ctx context.Context) (bool, error) {
		var err error
		got, err = managedTemplates(ctx, ns)
		return err == nil && ok(got), nil
	})
	return got, err
}

// startFakeGPUs runs the fake GPU driver with ND H100 v5's GPUs and its
// DeviceClass (9h, 9m), failing the scenario r when they cannot start; stop
// undoes both. The driver logs to stderr, not t: the kubelet plugin's
// goroutines may log while stopping, after the test's own logger is closed.
func startFakeGPUs(ctx context.Context, t *testing.T, r *Result) (gpus []fakegpu.GPU, stop func()) {
	t.Helper()
	topo, err := nccl.Topology("ndv5-topo.xml")
	if err != nil {
		fail(t, r, "fake GPU driver: %v", err)
	}
	if gpus, err = fakegpu.GPUs(topo); err != nil {
		fail(t, r, "fake GPU driver: %v", err)
	}
	log := funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, "fakegpu:", prefix, args) }, funcr.Options{})
	drv, err := fakegpu.Start(ctx, fakegpu.Config{Client: h.cs, NodeName: nodeName, GPUs: gpus, CDIDir: cdiDir, Log: log})
	if err != nil {
		fail(t, r, "fake GPU driver: %v", err)
	}
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: fakegpu.DeviceClass}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", fakegpu.DriverName)}}},
	}}
	_ = h.cs.ResourceV1().DeviceClasses().Delete(ctx, class.Name, metav1.DeleteOptions{})
	if _, err := h.cs.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		drv.Stop()
		fail(t, r, "fake GPU driver: DeviceClass %s: %v", class.Name, err)
	}
	return gpus, func() {
		_ = h.cs.ResourceV1().DeviceClasses().Delete(context.Background(), class.Name, metav1.DeleteOptions{})
		drv.Stop()
	}
}

// alignedPair is one pair of an allocated aligned claim: the rung its GPU
// took and where its devices sit, by the drivers' slices.
type alignedPair struct {
	rung     string
	gpu      string // device name in the fake driver's slice
	gpuBusID string
	gpuNUMA  int64
	hcas     []string // RDMA device names
	hcaNUMA  []int64
}

func (p *alignedPair) String() string {
	return fmt.Sprintf("{GPU %s (%s, NUMA %d) rung %s, HCAs %v on NUMA %v}", p.gpu, p.gpuBusID, p.gpuNUMA, p.rung, p.hcas, p.hcaNUMA)
}

// alignedAllocation reads the pod's aligned claim's allocation: its pairs
// by index, from the request names (gpu-<i>/<rung>, hca-<i>-<j>).
func alignedAllocation(ctx context.Context, ns, pod string) (map[int]*alignedPair, error) {
	p, err := h.cs.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var claim string
	for _, s := range p.Status.ResourceClaimStatuses {
		if s.Name == contract.AlignedClaim && s.ResourceClaimName != nil {
			claim = *s.ResourceClaimName
		}
	}
	if claim == "" {
		return nil, fmt.Errorf("pod %s/%s has no ResourceClaim for %s (statuses %v)", ns, pod, contract.AlignedClaim, p.Status.ResourceClaimStatuses)
	}
	c, err := h.cs.ResourceV1().ResourceClaims(ns).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if c.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s/%s is not allocated", ns, claim)
	}
	hcas, err := draDevices(ctx)
	if err != nil {
		return nil, err
	}
	gpus, err := driverDevices(ctx, fakegpu.DriverName)
	if err != nil {
		return nil, err
	}
	return pairsOf(c.Status.Allocation.Devices.Results, hcas, gpus), nil
}

// pairsOf groups an aligned claim's results into pairs.
func pairsOf(results []resourceapi.DeviceRequestAllocationResult, hcas, gpus map[string]resourceapi.Device) map[int]*alignedPair {
	out := map[int]*alignedPair{}
	pair := func(i int) *alignedPair {
		if out[i] == nil {
			out[i] = &alignedPair{gpuNUMA: -1}
		}
		return out[i]
	}
	for _, r := range results {
		if i, rung, ok := contract.AlignedRungOf(r.Request); ok && r.Driver == fakegpu.DriverName {
			g := gpus[r.Device]
			p := pair(i)
			p.rung, p.gpu, p.gpuNUMA = rung, r.Device, devInt(g, numaAttr)
			p.gpuBusID = devString(g, "resource.kubernetes.io/pciBusID")
			continue
		}
		if i, ok := contract.AlignedPairOf(r.Request); ok && r.Driver == draDriver {
			d := hcas[r.Device]
			p := pair(i)
			p.hcas = append(p.hcas, devString(d, contract.DRAAttrRDMADevice))
			p.hcaNUMA = append(p.hcaNUMA, devInt(d, numaAttr))
		}
	}
	return out
}

// gpuPairsEnv reads IBKUBE_GPU_PAIRS: each HCA's "<gpus>/<word>".
func gpuPairsEnv(rep ContainerReport) map[string]string {
	out := map[string]string{}
	for _, e := range strings.Split(rep.Env[contract.EnvGPUPairs], ",") {
		if hca, v, ok := strings.Cut(e, "="); ok {
			out[hca] = v
		}
	}
	return out
}

// checkPairsTold checks that the container's uverbs devices, NCCL_IB_HCA
// and IBKUBE_GPU_PAIRS all name the claim's HCAs, each with its pair's GPU
// and the nearness word want.
func checkPairsTold(t *testing.T, r *Result, pod string, rep ContainerReport, pairs map[int]*alignedPair, want string) {
	t.Helper()
	var hcas []string
	told := gpuPairsEnv(rep)
	for i, p := range pairs {
		for _, hca := range p.hcas {
			hcas = append(hcas, hca)
			check(t, r, told[hca] == p.gpuBusID+"/"+want, "%s: %s says %s=%q, want %s/%s (pair %d)", pod, contract.EnvGPUPairs, hca, told[hca], p.gpuBusID, want, i)
		}
	}
	sort.Strings(hcas)
	got, _ := uverbsHCAs(rep)
	check(t, r, slices.Equal(got, hcas), "%s: container has the uverbs devices of %v, the claim allocated %v", pod, got, hcas)
	nccl := hcaNames(rep.Env["NCCL_IB_HCA"])
	check(t, r, slices.Equal(nccl, hcas), "%s: NCCL_IB_HCA=%q names %v, the claim allocated %v", pod, rep.Env["NCCL_IB_HCA"], nccl, hcas)
	check(t, r, len(told) == len(hcas), "%s: %s=%q has %d entries, the claim %d HCAs", pod, contract.EnvGPUPairs, rep.Env[contract.EnvGPUPairs], len(told), len(hcas))
}

// checkStoredAligned checks that the stored pod holds the aligned claim
// from the template of n GPUs, and no GPU or rdma/ib extended resource.
func checkStoredAligned(ctx context.Context, t *testing.T, r *Result, name string, n int) {
	t.Helper()
	p, err := h.cs.CoreV1().Pods(alignedNS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		fail(t, r, "%v", err)
	}
	tpl := alignedTemplate(n)
	rc := p.Spec.ResourceClaims
	check(t, r, len(rc) == 1 && rc[0].Name == contract.AlignedClaim && ptr.Deref(rc[0].ResourceClaimTemplateName, "") == tpl,
		"stored pod %s has resourceClaims %v, want one %s from template %s", name, rc, contract.AlignedClaim, tpl)
	c := p.Spec.Containers[0]
	check(t, r, slices.ContainsFunc(c.Resources.Claims, func(rc corev1.ResourceClaim) bool { return rc.Name == contract.AlignedClaim }),
		"stored pod %s: container holds claims %v, want %s", name, c.Resources.Claims, contract.AlignedClaim)
	for _, res := range []corev1.ResourceName{contract.ResourceGPU, exclusiveRes} {
		_, inLimits := c.Resources.Limits[res]
		_, inRequests := c.Resources.Requests[res]
		check(t, r, !inLimits && !inRequests, "stored pod %s still asks %s (limits %v, requests %v): the claim should replace it", name, res, c.Resources.Limits, c.Resources.Requests)
	}
}

// 9m: the aligned claim through admission on the real scheduler. With
// alignedClaims on (the fake GPU driver's DeviceClass as gpuDeviceClass),
// the webhook's controller writes the templates into the opted-in
// namespace; an annotated 2-GPU pod is stored with the aligned claim in
// place of its extended resources, runs, and has each HCA on its GPU's
// NUMA node (ND H100 v5: one root per device, so numa-node is the best
// rung) and is told so; a 1-GPU pod whose only free GPUs sit on the NUMA
// node without free HCAs takes the any rung and gets GPUAlignmentFellBack;
// a pod without the annotation keeps its GPUs. alignedClaims goes back off
// at the end, also when a step failed, and the templates go.
func testDRAAlignedAdmission(t *testing.T, st *state, d *draState) {
	r, ctx := d.scenario(t, "9m-dra-aligned-admission", 12*time.Minute)
	gpus, stop := startFakeGPUs(ctx, t, r)
	defer stop()
	optedIn(ctx, t, alignedNS, true)
	claimNamespace(ctx, t)
	// Deferred after stop, so it runs first: the pods holding fake GPUs
	// go while the driver can still unprepare their claims.
	defer alignedClaimsOff(t, r)
	start := time.Now()
	if err := setAlignedClaims(ctx, fakegpu.DeviceClass); err != nil {
		fail(t, r, "turn alignedClaims on: %v", err)
	}
	if err := waitAlignedAdmission(ctx, true); err != nil {
		fail(t, r, "%v", err)
	}
	need := []string{alignedNS + "/" + alignedTemplate(1), alignedNS + "/" + alignedTemplate(2)}
	got, err := waitTemplates(ctx, alignedNS, func(have []string) bool {
		return slices.Contains(have, need[0]) && slices.Contains(have, need[1])
	})
	if err != nil {
		fail(t, r, "the webhook's controller wrote %v into %s, want %v among them: %v", got, alignedNS, need, err)
	}
	r.Figures["aligned_on_to_templates_seconds"] = time.Since(start).Seconds()
	r.Figures["aligned_templates_in_namespace"] = float64(len(got))
	alignedTwoGPUs(ctx, t, r)
	alignedFallBack(ctx, t, r, gpus)
	unannotatedUnchanged(ctx, t, r)
}

// alignedClaimsOff deletes the scenario's pods (left by a failed step),
// turns alignedClaims back off (the chart's defaults) and checks that the
// controller removes every template it kept.
func alignedClaimsOff(t *testing.T, r *Result) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*alignedConfigTimeout)
	defer cancel()
	_ = deletePodsNow(ctx, alignedNS, "aligned-two", "aligned-fallback")
	_ = deletePodsNow(ctx, draClaimNS, "fallback-hcas", "fallback-gpus")
	start := time.Now()
	if err := setAlignedClaims(ctx, ""); err != nil {
		check(t, r, false, "turn alignedClaims off again: %v", err)
		return
	}
	left, err := waitTemplates(ctx, "", func(have []string) bool { return len(have) == 0 })
	check(t, r, err == nil, "alignedClaims off: the controller's templates %v still there: %v", left, err)
	if err == nil {
		r.Figures["aligned_off_to_templates_gone_seconds"] = time.Since(start).Seconds()
	}
}

// alignedTwoGPUs: an annotated rdma-exclusive pod of 2 GPUs (profile
// ndv5: 2 HCAs) on a node with every GPU and at least 6 HCAs free gets
// both pairs on the numa-node rung.
func alignedTwoGPUs(ctx context.Context, t *testing.T, r *Result) {
	const name = "aligned-two"
	times, err := startPods(ctx, alignedNS, alignedPod(name, 2, true))
	if err != nil {
		fail(t, r, "aligned 2-GPU pod: %v", err)
	}
	r.Figures["aligned_pod_start_seconds"] = times[0]
	checkStoredAligned(ctx, t, r, name, 2)
	pairs, err := alignedAllocation(ctx, alignedNS, name)
	if err != nil {
		fail(t, r, "%v", err)
	}
	check(t, r, len(pairs) == 2, "%s: the claim has pairs %v, want 2", name, pairs)
	for i, p := range pairs {
		check(t, r, p.rung == contract.RungNUMANode, "%s pair %d: GPU %s took rung %q, want %s (ND H100 v5 pairs by NUMA node only, and the node has free pairs)", name, i, p.gpu, p.rung, contract.RungNUMANode)
		check(t, r, len(p.hcas) == 1, "%s pair %d: HCAs %v, want 1 (ndv5: one per GPU)", name, i, p.hcas)
		for j, n := range p.hcaNUMA {
			check(t, r, n == p.gpuNUMA && n >= 0, "%s pair %d: HCA %s on NUMA node %d, its GPU %s on %d", name, i, p.hcas[j], n, p.gpu, p.gpuNUMA)
		}
	}
	rep, err := h.containerReport(ctx, alignedNS, name, "main")
	if err != nil {
		fail(t, r, "%v", err)
	}
	checkPairsTold(t, r, name, rep, pairs, contract.NearNUMANode)
	r.Notes = append(r.Notes, fmt.Sprintf("aligned 2-GPU pod: %s=%s", contract.EnvGPUPairs, rep.Env[contract.EnvGPUPairs]))
	if err := deleteWithClaims(ctx, alignedNS, name); err != nil {
		fail(t, r, "%v", err)
	}
}

// deleteWithClaims deletes a pod and waits until its ResourceClaims are
// gone too, so the devices they held count as free to what comes next.
func deleteWithClaims(ctx context.Context, ns, name string) error {
	p, err := h.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("pod %s/%s: %w", ns, name, err)
	}
	claims := podClaims(p)
	if err := deletePodsNow(ctx, ns, name); err != nil {
		return fmt.Errorf("pod %s/%s did not go away: %w", ns, name, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, c := range claims {
			if _, err := h.cs.ResourceV1().ResourceClaims(ns).Get(ctx, c, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("claims %v of the deleted pod %s/%s still there: %w", claims, ns, name, err)
	}
	return nil
}

// alignedFallBack: NUMA node a's free HCAs and NUMA node b's GPUs are
// held, so the only free GPUs sit where no HCA is free: an aligned 1-GPU
// pod must take the any rung, runs with its GPU on a and its HCA on b, is
// told "none", and gets the agent's GPUAlignmentFellBack Warning.
func alignedFallBack(ctx context.Context, t *testing.T, r *Result, gpus []fakegpu.GPU) {
	const name = "aligned-fallback"
	a, b := holdCrossPairsOnly(ctx, t, r, gpus)
	if _, err := startPods(ctx, alignedNS, alignedPod(name, 1, true)); err != nil {
		fail(t, r, "aligned 1-GPU pod with no free pair: %v", err)
	}
	checkStoredAligned(ctx, t, r, name, 1)
	pairs, err := alignedAllocation(ctx, alignedNS, name)
	if err != nil {
		fail(t, r, "%v", err)
	}
	p := pairs[0]
	if p == nil || len(pairs) != 1 || len(p.hcas) != 1 {
		fail(t, r, "%s: the claim has pairs %v, want one GPU and one HCA", name, pairs)
	}
	check(t, r, p.rung == contract.RungAny, "%s: GPU %s took rung %q, want %s (no GPU free beside a free HCA)", name, p.gpu, p.rung, contract.RungAny)
	check(t, r, p.gpuNUMA == a && p.hcaNUMA[0] == b, "%s: GPU %s on NUMA node %d, HCA %s on %d; want the GPU on %d and the HCA on %d, the only free ones",
		name, p.gpu, p.gpuNUMA, p.hcas[0], p.hcaNUMA[0], a, b)
	rep, err := h.containerReport(ctx, alignedNS, name, "main")
	if err != nil {
		fail(t, r, "%v", err)
	}
	checkPairsTold(t, r, name, rep, pairs, contract.NearNone)
	checkFellBack(ctx, t, r, name)
	check(t, r, deleteWithClaims(ctx, alignedNS, name) == nil, "%s or its claim did not go away", name)
	check(t, r, deletePodsNow(ctx, draClaimNS, "fallback-gpus", "fallback-hcas") == nil, "the holder pods did not go away")
}

// holdCrossPairsOnly starts claim pods in draClaimNS holding NUMA node a's
// free HCAs and NUMA node b's GPUs, b being a node with a free HCA: what
// stays free pairs no GPU with an HCA of its NUMA node.
func holdCrossPairsOnly(ctx context.Context, t *testing.T, r *Result, gpus []fakegpu.GPU) (a, b int64) {
	t.Helper()
	perNUMA := map[int64]int64{}
	for _, n := range needFreeHCAs(ctx, t, r) {
		numa, _ := hcaNUMA(n)
		perNUMA[numa]++
	}
	b = 1
	if perNUMA[1] == 0 {
		b = 0
	}
	a = 1 - b
	var gpusOnB int64
	for _, g := range gpus {
		if g.NUMANode == b {
			gpusOnB++
		}
	}
	sel := func(n int64) string {
		return fmt.Sprintf(`device.attributes["resource.kubernetes.io"].numaNode == %d`, n)
	}
	holders := []*corev1.Pod{claimPod("fallback-gpus", "fallback-gpus")}
	tpls := []*resourceapi.ResourceClaimTemplate{claimTemplate("fallback-gpus", []draRequest{{name: "gpu", class: fakegpu.DeviceClass, count: gpusOnB, cel: sel(b)}})}
	if perNUMA[a] > 0 {
		tpls = append(tpls, claimTemplate("fallback-hcas", []draRequest{{name: "hca", class: classIB, count: perNUMA[a], cel: sel(a)}}))
		holders = append(holders, claimPod("fallback-hcas", "fallback-hcas"))
	}
	if err := createTemplates(ctx, draClaimNS, tpls...); err != nil {
		fail(t, r, "%v", err)
	}
	if _, err := startPods(ctx, draClaimNS, holders...); err != nil {
		fail(t, r, "holders of NUMA node %d's %d GPUs and NUMA node %d's %d free HCAs: %v", b, gpusOnB, a, perNUMA[a], err)
	}
	return a, b
}

// checkFellBack checks that the fall-back pod got the agent's Warning
// naming the any rung, and that the 2-GPU pod, whose pairs took the best
// rung ND H100 v5 offers, got none.
func checkFellBack(ctx context.Context, t *testing.T, r *Result, pod string) {
	t.Helper()
	var got []corev1.Event
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, fellBackWithin, true, func(ctx context.Context) (bool, error) {
		var err error
		got, err = alignedPodEvents(ctx, pod)
		return err == nil && len(got) > 0, nil
	})
	if !expect(t, r, err == nil, "%s: no %s Event within %s", pod, dra.ReasonGPUAlignmentFellBack, fellBackWithin) {
		return
	}
	e := got[0]
	check(t, r, e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, "(rung "+contract.RungAny+")"),
		"%s: %s Event is %s %q, want a Warning naming rung %s", pod, dra.ReasonGPUAlignmentFellBack, e.Type, e.Message, contract.RungAny)
	r.Notes = append(r.Notes, fmt.Sprintf("%s: %s", dra.ReasonGPUAlignmentFellBack, e.Message))
	best, err := alignedPodEvents(ctx, "aligned-two")
	check(t, r, err == nil && len(best) == 0, "aligned-two, on the numa-node rung, got %d %s Events (%v)", len(best), dra.ReasonGPUAlignmentFellBack, err)
}

// alignedPodEvents are the GPUAlignmentFellBack Events of a pod in alignedNS.
func alignedPodEvents(ctx context.Context, pod string) ([]corev1.Event, error) {
	l, err := h.cs.CoreV1().Events(alignedNS).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod + ",reason=" + dra.ReasonGPUAlignmentFellBack})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// unannotatedUnchanged: with alignedClaims on, a pod without ibkube's
// annotation asking GPUs in the opted-in namespace is stored as written
// (dry run): its GPUs stay an extended resource, no claim is added.
func unannotatedUnchanged(ctx context.Context, t *testing.T, r *Result) {
	p, err := h.cs.CoreV1().Pods(alignedNS).Create(ctx, alignedPod("plain-gpus", 2, false), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		fail(t, r, "a pod without the annotation asking 2 GPUs: %v", err)
	}
	c := p.Spec.Containers[0]
	q := c.Resources.Limits[contract.ResourceGPU]
	check(t, r, len(p.Spec.ResourceClaims) == 0 && len(c.Resources.Claims) == 0, "a pod without the annotation got claims %v (container %v)", p.Spec.ResourceClaims, c.Resources.Claims)
	check(t, r, q.Value() == 2, "a pod without the annotation asks %s: %s after admission, want 2", contract.ResourceGPU, q.String())
	_, hasHCAs := c.Resources.Limits[exclusiveRes]
	check(t, r, !hasHCAs, "a pod without the annotation was given %s", exclusiveRes)
}
