//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/ibkube/ibkube/contract"
)

// The cluster runs both allocation modes side by side: cluster.sh labels
// the HB node infiniband.azure.com/allocation=dra, so the chart's DRA agent
// serves it, and the ND and OCI nodes keep the device plugin.
const (
	draNode = hbNode
	// clusterRunDir is cluster.sh's RUN_DIR: each node's private /run/cdi
	// is <clusterRunDir>/<node>/cdi on the host.
	clusterRunDir = "/run/ibkc"
)

// nodeCDIDir is where a cluster node's private /var/run/cdi lies on the host.
func nodeCDIDir(node string) string {
	return filepath.Join(clusterRunDir, strings.TrimPrefix(node, "ibkc-"), "cdi")
}

// advertised is how many devices of res a node offers: its allocatable
// for a device-plugin node, its untainted ResourceSlice devices of that
// pool for the DRA node (whose allocatable is 0: served by DRA).
func (x *harness) advertised(ctx context.Context, node string, res corev1.ResourceName) (int64, error) {
	if node != draNode {
		return x.nodeAllocatable(ctx, node, res)
	}
	list, err := x.cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node + ",spec.driver=" + draDriver})
	if err != nil {
		return 0, err
	}
	var n int64
	for _, s := range list.Items {
		for _, d := range s.Spec.Devices {
			if devString(d, contract.DRAAttrPool) == string(res) && len(d.Taints) == 0 {
				n++
			}
		}
	}
	return n, nil
}

func (x *harness) waitAdvertised(ctx context.Context, node string, res corev1.ResourceName, timeout time.Duration, ok func(int64) bool) (int64, error) {
	return pollCount(ctx, timeout, func(ctx context.Context) (int64, error) { return x.advertised(ctx, node, res) }, ok)
}

// servedByDRA says whether the scheduler served a pod's extended resources
// through DRA (it then records the special claim in the pod's status).
func servedByDRA(p *corev1.Pod) bool { return p.Status.ExtendedResourceClaimStatus != nil }

// wantMode checks that a placed pod asking RDMA resources was served the
// way its node hands them out.
func wantMode(t *testing.T, r *Result, p *corev1.Pod) {
	t.Helper()
	want := p.Spec.NodeName == draNode
	check(t, r, servedByDRA(p) == want, "%s on %s: served by DRA %v, want %v (only %s runs the DRA agent)", p.Name, p.Spec.NodeName, servedByDRA(p), want, draNode)
}

// c9: DRA beside device plugins. The HB node's own agent publishes its
// ResourceSlice (the chart's ValidatingAdmissionPolicy lets an agent write
// only its own node's slices, so this is its real bound token passing it)
// and no other node has one; the same unchanged pod spec asking rdma/ib: 1
// is served by DRA on HB and by the device plugin on ND; the DRA pod's CDI
// spec is in HB's own /var/run/cdi only, and goes with the pod.
func testModesSideBySide(ctx context.Context, t *testing.T, r *Result) {
	const ns = "c9-modes"
	h.namespace(ctx, t, ns, nil, nil)
	devs, err := h.waitAdvertised(ctx, draNode, exclusiveRes, 2*time.Minute, func(v int64) bool { return v == 1 })
	check(t, r, err == nil, "the DRA node %s publishes %d untainted rdma/ib devices, want its fixture's 1", draNode, devs)
	all, err := h.cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + draDriver})
	if err != nil {
		fail(t, r, "list slices: %v", err)
	}
	for _, s := range all.Items {
		node := ""
		if s.Spec.NodeName != nil {
			node = *s.Spec.NodeName
		}
		check(t, r, node == draNode, "slice %s of node %q: only %s runs the DRA agent", s.Name, node, draNode)
	}

	pods := map[string]string{"ib-dra": draNode, "ib-dp": ndNode}
	for name, node := range pods {
		p := placementPod(name, map[corev1.ResourceName]int64{exclusiveRes: 1}, nil)
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
		if _, err := h.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			fail(t, r, "create %s: %v", name, err)
		}
	}
	var draUIDs []string
	for _, name := range []string{"ib-dra", "ib-dp"} {
		p, err := h.waitRunning(ctx, ns, name, podStartTimeout)
		if err != nil {
			fail(t, r, "%v", err)
		}
		wantMode(t, r, p)
		rep, err := h.containerReport(ctx, ns, name, "main")
		if !expect(t, r, err == nil, "%s report: %v", name, err) {
			continue
		}
		check(t, r, rep.uverbs() == 1, "%s sees %v, want one uverbs device", name, rep.devicePaths())
		check(t, r, rep.Env["NCCL_IB_HCA"] != "", "%s has no NCCL_IB_HCA", name)
		if name == "ib-dra" {
			devices, uids, err := allocated(ctx, p)
			check(t, r, err == nil && len(devices) == 1, "ib-dra allocation: %v %v", devices, err)
			draUIDs = uids
			r.Notes = append(r.Notes, fmt.Sprintf("ib-dra on %s: device %v, NCCL_IB_HCA %s", p.Spec.NodeName, devices, rep.Env["NCCL_IB_HCA"]))
		}
	}
	for _, uid := range draUIDs {
		check(t, r, len(globUID(nodeCDIDir(draNode), uid)) == 1, "claim %s: no CDI spec in %s's own %s", uid, draNode, nodeCDIDir(draNode))
		for _, other := range []string{ndNode, ociNode} {
			check(t, r, len(globUID(nodeCDIDir(other), uid)) == 0, "claim %s: a CDI spec in %s's directory", uid, other)
		}
		check(t, r, len(globUID("/run/cdi", uid)) == 0, "claim %s: a CDI spec in the host's /run/cdi (not private to the node)", uid)
	}
	if err := deletePodsNow(ctx, ns, "ib-dra"); err != nil {
		fail(t, r, "%v", err)
	}
	for _, uid := range draUIDs {
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return len(globUID(nodeCDIDir(draNode), uid)) == 0, nil
		})
		check(t, r, err == nil, "claim %s: CDI spec still in %s after its pod was deleted", uid, nodeCDIDir(draNode))
	}
	// Gone before the next scenario counts ND's free HCAs.
	if err := deletePodsNow(ctx, ns, "ib-dp"); err != nil {
		check(t, r, false, "%v", err)
	}
}

func globUID(dir, uid string) []string {
	m, _ := filepath.Glob(filepath.Join(dir, "*"+uid+"*"))
	return m
}

// c10: on a device-plugin node, exclusive is exclusive as far as the
// kubelet lets the agent make it: a shared pod admitted while another pod
// holds HCAs exclusively gets every other HCA and not those (its uverbs
// devices and NCCL_IB_HCA); an exclusive pod the kubelet admits later on
// an HCA the sharer reaches (which no device plugin can refuse) raises a
// node Warning RDMAExclusiveShared naming both pods.
func testExclusiveLeftOut(ctx context.Context, t *testing.T, r *Result) {
	const ns = "c10-exclusive"
	h.namespace(ctx, t, ns, nil, nil)
	onND := func(p *corev1.Pod) *corev1.Pod {
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": ndNode}
		return p
	}
	held := h.startReport(ctx, t, r, ns, onND(placementPod("held", map[corev1.ResourceName]int64{exclusiveRes: 2}, nil)))
	heldHCAs := hcasOf(held.Env["NCCL_IB_HCA"])
	check(t, r, len(heldHCAs) == 2, "held: NCCL_IB_HCA %q, want 2 HCAs", held.Env["NCCL_IB_HCA"])
	since := time.Now()
	sharer := h.startReport(ctx, t, r, ns, onND(placementPod("sharer", map[corev1.ResourceName]int64{sharedRes: 1}, nil)))
	got := hcasOf(sharer.Env["NCCL_IB_HCA"])
	r.Notes = append(r.Notes, fmt.Sprintf("held %v; sharer NCCL_IB_HCA %s, devices %v", heldHCAs, sharer.Env["NCCL_IB_HCA"], sharer.devicePaths()))
	check(t, r, len(got) == 8-len(heldHCAs), "sharer: NCCL_IB_HCA %q names %d HCAs, want the %d not held exclusively", sharer.Env["NCCL_IB_HCA"], len(got), 8-len(heldHCAs))
	check(t, r, sharer.uverbs() == 8-len(heldHCAs), "sharer sees %d uverbs devices (%v), want %d", sharer.uverbs(), sharer.devicePaths(), 8-len(heldHCAs))
	for _, hca := range heldHCAs {
		check(t, r, !contains(got, hca), "sharer reaches %s, which held holds exclusively", hca)
	}
	late := h.startReport(ctx, t, r, ns, onND(placementPod("late", map[corev1.ResourceName]int64{exclusiveRes: 1}, nil)))
	lateHCA := hcasOf(late.Env["NCCL_IB_HCA"])
	var msg string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := h.cs.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + ndNode + ",reason=RDMAExclusiveShared"})
		if err != nil {
			return false, nil
		}
		for _, e := range l.Items {
			if e.LastTimestamp.Time.Add(time.Second).After(since) && strings.Contains(e.Message, ns+"/late/") && strings.Contains(e.Message, ns+"/sharer/") {
				msg = e.Message
				return true, nil
			}
		}
		return false, nil
	})
	r.Figures["overlap_event_seconds"] = time.Since(since).Seconds()
	check(t, r, err == nil, "no node Event RDMAExclusiveShared naming %s/late (on %v) and %s/sharer within 2 minutes", ns, lateHCA, ns)
	r.Notes = append(r.Notes, "overlap Event: "+msg)
	_ = h.cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{})
}

// hcasOf reads the HCA names out of NCCL_IB_HCA ("=mlx5_0:1,mlx5_3:1"), sorted.
func hcasOf(v string) []string {
	var out []string
	for _, f := range strings.Split(strings.TrimPrefix(v, "="), ",") {
		if name, _, _ := strings.Cut(f, ":"); name != "" {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}
