//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/internal/testing/suitetest"
	"github.com/ibkube/ibkube/node/deviceplugin"
)

// The cluster test/e2e/node/cluster.sh brings up (make e2e-cluster): one
// node per simulated host, each with its fixture under /dev/ibkc-fixture/<n>
// on the host (bound at /dev/ibk-e2e-fixture inside the node).
const (
	ndNode  = "ibkc-nd"  // ND H100 v5: 8 InfiniBand HCAs, 8 (fake) GPUs
	hbNode  = "ibkc-hb"  // HB120rs_v3: 1 InfiniBand HCA, no GPU (hb2 is another)
	ociNode = "ibkc-oci" // BM.GPU.H100.8: 16 RoCE ports (+2 front-end), 8 (fake) GPUs

	roceRes = corev1.ResourceName("rdma/roce")
	gpuRes  = corev1.ResourceName("nvidia.com/gpu")
	// The IPoIB network's whereabouts range (test/e2e/values-cluster.yaml).
	ipoibRange = "198.18.64.0/24"
)

// clusterAllocatable is what each node must advertise, from the fixtures:
// ndv5 has 8 InfiniBand VFs and one Ethernet VF (not a RoCE pool member:
// device 101a); hb and hb2 one InfiniBand VF each; oci-h100 16 RoCE ConnectX-7 ports and
// two front-end ports the rdma/roce selector excludes by name. The HB node
// runs the DRA agent, so it advertises in its ResourceSlice
// (harness.advertised).
var clusterAllocatable = map[string]map[corev1.ResourceName]int64{
	ndNode:  {exclusiveRes: 8, roceRes: 0},
	hbNode:  {exclusiveRes: 1, roceRes: 0},
	hb2Node: {exclusiveRes: 1, roceRes: 0},
	ociNode: {exclusiveRes: 0, roceRes: 16},
}

func fixtureOf(node string) string {
	return filepath.Join("/dev/ibkc-fixture", strings.TrimPrefix(node, "ibkc-"))
}

// clusterState carries what earlier cluster scenarios established.
type clusterState struct {
	installed, agents bool
	why               string
}

func (st *clusterState) need(t *testing.T, r *Result, agents bool) {
	t.Helper()
	if !st.installed || (agents && !st.agents) {
		skip(t, r, "%s", st.why)
	}
}

func TestCluster(t *testing.T) {
	if os.Getenv("E2E_CLUSTER") == "" {
		t.Skip("the multi-node scenarios run on the cluster of make e2e-cluster")
	}
	// Bursts of rdma-shared pods in baseline namespaces would print the
	// webhook's IPC_LOCK warning once per pod; scenarios check what matters.
	rest.SetDefaultWarningHandler(rest.NoWarnings{})
	st := clusterState{why: "chart not installed"}
	t.Run("c1-install", func(t *testing.T) { testClusterInstall(t, &st) })
	for _, sc := range []struct {
		name    string
		agents  bool // needs every node's agent, not only the chart
		timeout time.Duration
		run     func(context.Context, *testing.T, *Result)
	}{
		{"c2-placement", true, 5 * time.Minute, testPlacement},
		{"c3-webhook-spread", false, time.Minute, testWebhookSpread},
		{"c4-ipoib-multus", true, 5 * time.Minute, testIPoIBMultus},
		{"c5-agent-rollout", true, 8 * time.Minute, testAgentRollout},
		{"c6-helm-upgrade-rollback", false, 12 * time.Minute, testUpgradeRollback},
		{"c7-kubelet-restarts", true, 15 * time.Minute, testKubeletRestarts},
		{"c8-node-lost", false, 8 * time.Minute, testNodeLost},
		{"c9-modes-side-by-side", true, 5 * time.Minute, testModesSideBySide},
		{"c10-exclusive-left-out", true, 5 * time.Minute, testExclusiveLeftOut},
		{"c11-partition-labels", true, time.Minute, testPartitionLabels},
		{"c12-job-one-partition", true, 6 * time.Minute, testJobOnePartition},
		{"c13-jobset-one-partition", true, 6 * time.Minute, testJobSetOnePartition},
		{"c14-job-no-partition-fits", true, 6 * time.Minute, testJobNoPartitionFits},
		{"c15-job-split-event", true, 5 * time.Minute, testJobSplitEvent},
		{"c16-own-affinity-left-alone", true, 2 * time.Minute, testOwnAffinityLeftAlone},
		{"c17-label-follows-fixture", true, 4 * time.Minute, testLabelFollowsFixture},
		{"c18-scheduling-32-pods", true, 15 * time.Minute, testScheduling32},
	} {
		t.Run(sc.name, func(t *testing.T) {
			r := h.scenario(t, sc.name)
			st.need(t, r, sc.agents)
			sc.run(ctxT(t, sc.timeout), t, r)
		})
	}
}

func (x *harness) helmCluster(ctx context.Context, args ...string) (string, error) {
	base := []string{"upgrade", "--install", release, filepath.Join(x.root, "charts/ibkube"),
		"--namespace", releaseNS, "--create-namespace",
		"-f", filepath.Join(x.root, "test/e2e/values-e2e.yaml"),
		"-f", filepath.Join(x.root, "test/e2e/values-cluster.yaml"),
		"--wait", "--timeout", "5m"}
	return run(ctx, x.helm, append(base, args...)...)
}

// c1: the chart on four nodes: webhook Ready, one agent per node, each node
// advertising exactly its own fixture's pools, and labelled with its
// partition (the figure: agent start to label, from a Node watch opened
// before the install).
func testClusterInstall(t *testing.T, st *clusterState) {
	r := h.scenario(t, "c1-install")
	ctx := ctxT(t, 8*time.Minute)
	for _, b := range []string{"ibkube-webhook", "ibkube-node-agent", "ibkube-cni"} {
		if !h.binaryExists(b) {
			st.why = b + " is not built (make build)"
			skip(t, r, "%s", st.why)
		}
	}
	labels := startLabelWatch(ctx)
	start := time.Now()
	if _, err := h.helmCluster(ctx); err != nil {
		diag, _ := h.kubectlRun(ctx, "-n", releaseNS, "get", "pods,events", "-o", "wide")
		st.why = "helm install failed"
		fail(t, r, "helm install: %v\n%s", err, diag)
	}
	r.Figures["helm_install_seconds"] = time.Since(start).Seconds()
	st.installed = true
	// helm --wait may return before the DaemonSet's status counts every
	// node's agent Ready.
	// The device-plugin agent's DaemonSet on ND, hb2 and OCI, the DRA
	// agent's on HB (labelled infiniband.azure.com/allocation=dra by
	// cluster.sh).
	ready := map[string]int32{}
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		ds, err := h.cs.AppsV1().DaemonSets(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=node-agent"})
		if err != nil {
			return false, nil
		}
		for _, d := range ds.Items {
			ready[d.Labels["infiniband.azure.com/allocation"]] = d.Status.NumberReady
		}
		return ready["deviceplugin"] == 3 && ready["dra"] == 1, nil
	})
	r.Figures["agents_ready"] = float64(ready["deviceplugin"] + ready["dra"])
	check(t, r, err == nil, "agent DaemonSets: device plugin ready on %d of 3 nodes, DRA on %d of 1", ready["deviceplugin"], ready["dra"])
	ok := true
	for node, want := range clusterAllocatable {
		for res, n := range want {
			got, err := h.waitAdvertised(ctx, node, res, 2*time.Minute, func(v int64) bool { return v == n })
			short := strings.TrimPrefix(node, "ibkc-")
			r.Figures[fmt.Sprintf("allocatable_%s_%s", short, strings.ReplaceAll(string(res), "/", "_"))] = float64(got)
			if err != nil {
				ok = false
				check(t, r, false, "node %s allocatable %s is %d, want %d", node, res, got, n)
			}
		}
	}
	// The shared pool is a plugin (or slice device) of its own, registered
	// apart from the exclusive one waited on above.
	for _, node := range []string{ndNode, hbNode, hb2Node} {
		s, _ := h.waitAdvertised(ctx, node, sharedRes, time.Minute, func(v int64) bool { return v > 0 })
		check(t, r, s > 0, "node %s allocatable %s is 0", node, sharedRes)
	}
	s, _ := h.nodeAllocatable(ctx, ociNode, sharedRes)
	check(t, r, s == 0, "RoCE node %s advertises %s = %d (its pool selects InfiniBand ports)", ociNode, sharedRes, s)
	partitionLabelFigures(ctx, t, r, labels)
	st.agents = ok
	if !ok {
		st.why = "node allocatable does not match the fixtures"
	}
}

// placementPod is a report pod asking for resources in its limits.
func placementPod(name string, limits map[corev1.ResourceName]int64, annos map[string]string) *corev1.Pod {
	p := reportPod(name, annos)
	if len(limits) > 0 {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{}
		for res, n := range limits {
			p.Spec.Containers[0].Resources.Limits[res] = *resource.NewQuantity(n, resource.DecimalSI)
		}
	}
	return p
}

// c2: pods land only where their resources exist: InfiniBand pools on the
// Azure nodes, RoCE on OCI, HCA counts respected, an impossible count stays
// Pending.
func testPlacement(ctx context.Context, t *testing.T, r *Result) {
	const ns = "c2-placement"
	h.namespace(ctx, t, ns, nil, nil)
	cases := []struct {
		pod    *corev1.Pod
		nodes  []string // where it may land; empty: must stay unschedulable
		reason string
	}{
		{placementPod("ib-2", map[corev1.ResourceName]int64{exclusiveRes: 2}, nil), []string{ndNode}, "2 InfiniBand HCAs: only the ND node has more than one"},
		{placementPod("ib-1", map[corev1.ResourceName]int64{exclusiveRes: 1}, nil), []string{ndNode, hbNode, hb2Node}, "1 InfiniBand HCA: ND or hb2 (device plugin) or HB (DRA)"},
		{placementPod("roce-4", map[corev1.ResourceName]int64{roceRes: 4}, nil), []string{ociNode}, "RoCE: only OCI"},
		{placementPod("roce-gpu", map[corev1.ResourceName]int64{roceRes: 8, gpuRes: 8}, nil), []string{ociNode}, "RoCE with 8 GPUs: only OCI"},
		{notOn(placementPod("shared", map[corev1.ResourceName]int64{sharedRes: 1}, nil), hb2Node), []string{ndNode, hbNode}, "the shared InfiniBand pool: ND (device plugin) or HB (DRA)"},
		{placementPod("ib-9", map[corev1.ResourceName]int64{exclusiveRes: 9}, nil), nil, "9 InfiniBand HCAs: no node has them"},
		{placementPod("ib-gpu", map[corev1.ResourceName]int64{exclusiveRes: 1, gpuRes: 1}, nil), []string{ndNode}, "InfiniBand with a GPU: only ND (HB has no GPU)"},
	}
	for _, c := range cases {
		if _, err := h.cs.CoreV1().Pods(ns).Create(ctx, c.pod, metav1.CreateOptions{}); err != nil {
			fail(t, r, "create %s: %v", c.pod.Name, err)
		}
	}
	placed := 0
	for _, c := range cases {
		if len(c.nodes) == 0 {
			err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
				p, err := h.cs.CoreV1().Pods(ns).Get(ctx, c.pod.Name, metav1.GetOptions{})
				if err != nil {
					return false, nil
				}
				return suitetest.Unschedulable(p) != nil || p.Spec.NodeName != "", nil
			})
			p, _ := h.cs.CoreV1().Pods(ns).Get(ctx, c.pod.Name, metav1.GetOptions{})
			if expect(t, r, err == nil && p != nil && p.Spec.NodeName == "", "%s (%s): scheduled to %q or no Unschedulable condition: %v", c.pod.Name, c.reason, nodeOf(p), err) {
				placed++
			}
			continue
		}
		p, err := h.waitRunning(ctx, ns, c.pod.Name, podStartTimeout)
		if err != nil {
			check(t, r, false, "%s (%s): %v", c.pod.Name, c.reason, err)
			continue
		}
		if expect(t, r, contains(c.nodes, p.Spec.NodeName), "%s (%s): landed on %s, want one of %v", c.pod.Name, c.reason, p.Spec.NodeName, c.nodes) {
			placed++
		}
		wantMode(t, r, p)
		r.Notes = append(r.Notes, fmt.Sprintf("%s -> %s", c.pod.Name, p.Spec.NodeName))
	}
	r.Figures["pods"] = float64(len(cases))
	r.Figures["placed_as_expected"] = float64(placed)
	// The RoCE pod got RoCE devices of the OCI fixture, not InfiniBand ones.
	rep, err := h.containerReport(ctx, ns, "roce-4", "main")
	if expect(t, r, err == nil, "roce-4 report: %v", err) {
		n := 0
		for _, d := range rep.Devices {
			if strings.Contains(d.Path, "uverbs") {
				n++
				ibdev, err := os.ReadFile(filepath.Join(fixture.SysfsRoot(fixtureOf(ociNode)), "class/infiniband_verbs", filepath.Base(d.Path), "ibdev"))
				check(t, r, err == nil, "roce-4: %s is not a uverbs device of the OCI fixture: %v", d.Path, err)
				if err == nil {
					ll, _ := os.ReadFile(filepath.Join(fixture.SysfsRoot(fixtureOf(ociNode)), "class/infiniband", strings.TrimSpace(string(ibdev)), "ports/1/link_layer"))
					check(t, r, strings.TrimSpace(string(ll)) == "Ethernet", "roce-4: %s (%s) has link layer %q, want Ethernet", d.Path, strings.TrimSpace(string(ibdev)), strings.TrimSpace(string(ll)))
				}
			}
		}
		check(t, r, n == 4, "roce-4 sees %d uverbs devices (%v), want 4", n, rep.devicePaths())
	}
	_ = h.cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{})
}

// notOn keeps a pod off node. c2's shared pod stays off hb2: ib-1 may hold
// hb2's only HCA exclusively, and a device-plugin node refuses a shared
// container when every HCA is held (node/resource's shared grant), which
// the scheduler cannot see.
func notOn(p *corev1.Pod, node string) *corev1.Pod {
	p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
			Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpNotIn, Values: []string{node},
		}}}},
	}}}
	return p
}

func nodeOf(p *corev1.Pod) string {
	if p == nil {
		return ""
	}
	return p.Spec.NodeName
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func (x *harness) webhookPods(ctx context.Context) ([]corev1.Pod, error) {
	l, err := x.cs.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=webhook"})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// c3: the webhook's replicas run on different nodes.
func testWebhookSpread(ctx context.Context, t *testing.T, r *Result) {
	pods, err := h.webhookPods(ctx)
	if err != nil {
		fail(t, r, "%v", err)
	}
	nodes := map[string]bool{}
	for _, p := range pods {
		nodes[p.Spec.NodeName] = true
		r.Notes = append(r.Notes, fmt.Sprintf("%s on %s", p.Name, p.Spec.NodeName))
	}
	r.Figures["replicas"] = float64(len(pods))
	r.Figures["nodes"] = float64(len(nodes))
	check(t, r, len(pods) >= 2 && len(nodes) == len(pods), "%d webhook replicas on %d nodes, want each on its own node", len(pods), len(nodes))
}

// podNetIP returns the address Multus reports for the pod's interface
// (k8s.v1.cni.cncf.io/network-status).
func podNetIP(p *corev1.Pod, iface string) string {
	var status []struct {
		Interface string   `json:"interface"`
		IPs       []string `json:"ips"`
	}
	if err := json.Unmarshal([]byte(p.Annotations["k8s.v1.cni.cncf.io/network-status"]), &status); err != nil {
		return ""
	}
	for _, s := range status {
		if s.Interface == iface && len(s.IPs) > 0 {
			return s.IPs[0]
		}
	}
	return ""
}

func containerID(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if id, ok := strings.CutPrefix(cs.ContainerID, "containerd://"); ok {
			return id
		}
	}
	return ""
}

// c4: two ipoib-mode pods on two InfiniBand nodes get net1 from the NAD's
// whereabouts range through Multus and ibkube-cni (parent resolved on each
// node from its own fixture), and reach each other over it.
func testIPoIBMultus(ctx context.Context, t *testing.T, r *Result) {
	const ns = "c4-ipoib"
	optedIn(ctx, t, ns, true)
	_, cidr, _ := net.ParseCIDR(ipoibRange)
	pods := map[string]string{"ipoib-nd": ndNode, "ipoib-hb": hbNode}
	for name, node := range pods {
		p := reportPod(name, map[string]string{prefix + "mode": "ipoib"})
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
		if _, err := h.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			fail(t, r, "create %s: %v", name, err)
		}
	}
	ips := map[string]string{}
	running := map[string]*corev1.Pod{}
	start := time.Now()
	for name := range pods {
		p, err := h.waitRunning(ctx, ns, name, podStartTimeout)
		if err != nil {
			diag, _ := h.kubectlRun(ctx, "-n", ns, "get", "events", "--field-selector", "involvedObject.name="+name)
			fail(t, r, "%v\n%s", err, diag)
		}
		running[name] = p
		rep, err := h.containerReport(ctx, ns, name, "main")
		if err != nil {
			fail(t, r, "%v", err)
		}
		var addrs []string
		for _, i := range rep.Interfaces {
			if i.Name == "net1" {
				addrs = i.Addrs
			}
		}
		var ip net.IP
		for _, a := range addrs {
			if v, _, err := net.ParseCIDR(a); err == nil && v.To4() != nil {
				ip = v
			}
		}
		check(t, r, ip != nil && cidr.Contains(ip), "%s on %s: net1 addresses %v, want one in %s", name, p.Spec.NodeName, addrs, ipoibRange)
		check(t, r, podNetIP(p, "net1") == ip.String(), "%s: Multus network-status says net1 is %q, the container has %v", name, podNetIP(p, "net1"), ip)
		check(t, r, rep.Env["NCCL_SOCKET_IFNAME"] == "net1" || (rep.NCCLConf != nil && strings.Contains(rep.NCCLConf.Content, "NCCL_SOCKET_IFNAME=net1")),
			"%s: NCCL_SOCKET_IFNAME is not net1 (env %q)", name, rep.Env["NCCL_SOCKET_IFNAME"])
		if ip != nil {
			ips[name] = ip.String()
		}
		r.Notes = append(r.Notes, fmt.Sprintf("%s on %s: net1 %s", name, p.Spec.NodeName, ip))
	}
	r.Figures["pods_running_seconds"] = time.Since(start).Seconds()
	// The parent ibkube-cni resolved on each node, from the record it keeps
	// for DEL (its state dir, /var/lib/cni/ibkube inside the node): the
	// first ACTIVE InfiniBand port's netdev of that node's own fixture.
	for node, want := range map[string]string{ndNode: "ibP257p0s0", hbNode: "ib0"} {
		got := cniParents(filepath.Join(h.e2eDir, "nodes", strings.TrimPrefix(node, "ibkc-"), "cni-state/ibkube"))
		check(t, r, len(got) == 1 && got[0] == want, "ibkube-cni on %s resolved parents %v, want [%s]", node, got, want)
		r.Notes = append(r.Notes, fmt.Sprintf("ibkube-cni on %s: parent %v", node, got))
	}
	if ips["ipoib-nd"] == "" || ips["ipoib-hb"] == "" {
		fail(t, r, "no net1 addresses to connect: %v", ips)
	}
	check(t, r, ips["ipoib-nd"] != ips["ipoib-hb"], "both pods got %s", ips["ipoib-nd"])
	// A TCP exchange over net1, from the ND pod's network namespace to a
	// listener in the HB pod's (the report image has no client or server).
	start = time.Now()
	out, err := h.clusterSh(ctx, "net-probe", "hb", containerID(running["ipoib-hb"]), ips["ipoib-hb"], "nd", containerID(running["ipoib-nd"]), ips["ipoib-nd"])
	r.Figures["net1_tcp_exchange_seconds"] = time.Since(start).Seconds()
	check(t, r, err == nil && strings.Contains(out, "ibkube-over-net1"), "TCP over net1 from %s to %s: %v %s", ips["ipoib-nd"], ips["ipoib-hb"], err, out)
	_ = h.cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{})
}

// cniParents lists the parent netdevs in ibkube-cni's attachment records
// under dir.
func cniParents(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		var rec struct {
			Parent struct {
				HCA    string `json:"hca"`
				Netdev string `json:"netdev"`
			} `json:"parent"`
		}
		if json.Unmarshal(b, &rec) == nil {
			out = append(out, rec.Parent.Netdev)
		}
	}
	sort.Strings(out)
	return out
}

// procOf returns the host PID of a running pod's first container.
func procOf(ctx context.Context, p *corev1.Pod) (int, error) {
	out, err := h.clusterSh(ctx, "pod-pid", strings.TrimPrefix(p.Spec.NodeName, "ibkc-"), containerID(p))
	if err != nil {
		return 0, err
	}
	var pid int
	if _, err := fmt.Sscan(strings.TrimSpace(out), &pid); err != nil || pid <= 0 {
		return 0, fmt.Errorf("pid of %s: %q", p.Name, out)
	}
	return pid, nil
}

// liveView is what a running container holds now, read by the host from
// /proc/<pid>: its /dev/infiniband entries and RLIMIT_MEMLOCK line.
func liveView(pid int) (devs []string, memlock string, err error) {
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/root/dev/infiniband", pid))
	if err != nil {
		return nil, "", err
	}
	for _, e := range entries {
		devs = append(devs, e.Name())
	}
	sort.Strings(devs)
	limits, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		return nil, "", err
	}
	for _, l := range strings.Split(string(limits), "\n") {
		if strings.HasPrefix(l, "Max locked memory") {
			memlock = strings.Join(strings.Fields(l)[3:], " ")
		}
	}
	return devs, memlock, nil
}

// c5: the agent DaemonSet is rolled while RDMA pods run: the running pods
// keep their devices and memlock (same container, read live from /proc), and
// pods created after the roll get devices.
func testAgentRollout(ctx context.Context, t *testing.T, r *Result) {
	const ns = "c5-rollout"
	optedIn(ctx, t, ns, true)
	before := map[string][2]string{}
	pids := map[string]int{}
	specs := map[string]map[string]string{
		"excl-nd": {prefix + "mode": "rdma-exclusive", prefix + "hcas": "2"},
		"shared":  {prefix + "mode": "rdma-shared"},
	}
	for name, annos := range specs {
		p := reportPod(name, annos)
		if name == "excl-nd" {
			p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": ndNode}
		} else {
			p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": hbNode}
		}
		if _, err := h.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			fail(t, r, "create %s: %v", name, err)
		}
	}
	for name := range specs {
		p, err := h.waitRunning(ctx, ns, name, podStartTimeout)
		if err != nil {
			fail(t, r, "%v", err)
		}
		pid, err := procOf(ctx, p)
		if err != nil {
			fail(t, r, "%v", err)
		}
		devs, ml, err := liveView(pid)
		if err != nil {
			fail(t, r, "%s: %v", name, err)
		}
		check(t, r, len(devs) > 0, "%s: no /dev/infiniband devices before the roll", name)
		pids[name] = pid
		before[name] = [2]string{strings.Join(devs, ","), ml}
	}
	start := time.Now()
	if out, err := h.kubectlRun(ctx, "-n", releaseNS, "rollout", "restart", "daemonset", "-l", "app.kubernetes.io/component=node-agent"); err != nil {
		fail(t, r, "rollout restart: %v %s", err, out)
	}
	if out, err := h.kubectlRun(ctx, "-n", releaseNS, "rollout", "status", "daemonset", "-l", "app.kubernetes.io/component=node-agent", "--timeout=5m"); err != nil {
		fail(t, r, "rollout status: %v %s", err, out)
	}
	r.Figures["rollout_seconds"] = time.Since(start).Seconds()
	for name := range specs {
		p, err := h.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			fail(t, r, "%v", err)
		}
		restarts := int32(0)
		for _, cs := range p.Status.ContainerStatuses {
			restarts += cs.RestartCount
		}
		check(t, r, p.Status.Phase == corev1.PodRunning && restarts == 0, "%s after the roll: phase %s, %d restarts", name, p.Status.Phase, restarts)
		devs, ml, err := liveView(pids[name])
		if !expect(t, r, err == nil, "%s after the roll: %v", name, err) {
			continue
		}
		now := [2]string{strings.Join(devs, ","), ml}
		check(t, r, now == before[name], "%s: devices/memlock %v before the roll, %v after", name, before[name], now)
		r.Notes = append(r.Notes, fmt.Sprintf("%s: devices %s, memlock %s (kept)", name, now[0], now[1]))
	}
	for node, want := range clusterAllocatable {
		got, err := h.waitAdvertised(ctx, node, exclusiveRes, time.Minute, func(v int64) bool { return v == want[exclusiveRes] })
		check(t, r, err == nil, "after the roll %s allocatable %s is %d, want %d", node, exclusiveRes, got, want[exclusiveRes])
	}
	p := reportPod("after", map[string]string{prefix + "mode": "rdma-exclusive", prefix + "hcas": "1"})
	p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": ndNode}
	rep := h.startReport(ctx, t, r, ns, p)
	check(t, r, rep.uverbs() == 1, "pod created after the roll sees %v, want one uverbs device", rep.devicePaths())
	check(t, r, rep.Memlock.Soft > runtimeMemlock, "pod created after the roll: memlock soft %d not raised", rep.Memlock.Soft)
	_ = h.cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{})
}

// creator creates pods that the webhook must mutate, bound to a node that
// does not exist (admitted and stored, never run), until stopped, and counts
// refusals and unmutated pods.
type creator struct {
	ns         string
	stop, done chan struct{}
	total      int
	refused    []string
	mu         sync.Mutex
}

// startCreator creates a pod in ns every period until finish.
func startCreator(ctx context.Context, ns string, every time.Duration) *creator {
	c := &creator{ns: ns, stop: make(chan struct{}), done: make(chan struct{})}
	go func() { defer close(c.done); c.run(ctx, c.stop, every) }()
	return c
}

// finish stops the creation and reports it: every stored pod must be
// mutated; refusals are reported, not failed: a replica that closes its
// keep-alive connections on SIGTERM races the API server's next request on
// a pooled connection ("write: broken pipe"), which the API server does not
// retry. Goal 0; see docs/e2e.md.
func (c *creator) finish(ctx context.Context, t *testing.T, r *Result) {
	t.Helper()
	close(c.stop)
	<-c.done
	stored, unmutated, err := c.unmutated(ctx)
	if err != nil {
		fail(t, r, "%v", err)
	}
	r.Figures["pods_created"] = float64(c.total)
	r.Figures["pods_refused"] = float64(len(c.refused))
	r.Figures["pods_unmutated"] = float64(unmutated)
	r.Figures["pods_stored"] = float64(stored)
	check(t, r, unmutated == 0, "%d of %d stored pods not mutated", unmutated, stored)
	if len(c.refused) > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("goal 0 refused missed: %d of %d creations refused, e.g. %v", len(c.refused), c.total, firstN(c.refused, 2)))
	}
}

func (c *creator) run(ctx context.Context, stop <-chan struct{}, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		p := reportPod(fmt.Sprintf("p-%04d", i), map[string]string{prefix + "mode": "rdma-shared"})
		p.Spec.NodeName = "no-such-node"
		_, err := h.cs.CoreV1().Pods(c.ns).Create(ctx, p, metav1.CreateOptions{})
		c.mu.Lock()
		c.total++
		if err != nil {
			c.refused = append(c.refused, err.Error())
		}
		c.mu.Unlock()
	}
}

// unmutated counts the stored pods of the namespace without ibkube's mark.
func (c *creator) unmutated(ctx context.Context) (stored, unmutated int, err error) {
	l, err := h.cs.CoreV1().Pods(c.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, 0, err
	}
	for _, p := range l.Items {
		if p.Annotations[prefix+"injected"] == "" {
			unmutated++
		}
	}
	return len(l.Items), unmutated, nil
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// configInEffectTimeout bounds c6's wait for a helm step's config to admit
// pods: 0.02–5.2 s after helm returned on a quiet machine (old replicas
// serve through their 5 s preStop drain), far longer beside busy workers.
const configInEffectTimeout = 2 * time.Minute

// c6: helm upgrade changing the webhook's config (memlock) and the image tag
// during continuous pod creation (one pod per 250 ms), then helm rollback: every pod admitted and
// mutated; pods created after each step carry that step's config.
func testUpgradeRollback(ctx context.Context, t *testing.T, r *Result) {
	const ns = "c6-upgrade"
	optedIn(ctx, t, ns, true)
	c := startCreator(ctx, ns, 250*time.Millisecond)
	// Old replicas keep serving through their preStop drain, so a new
	// config is in effect once every pod admitted says so: probe until one
	// does, and report how long that took after helm returned.
	probeUntil := func(name string, ok func(string) bool) (string, float64) {
		start := time.Now()
		var last string
		for i := 0; ; i++ {
			p := reportPod(fmt.Sprintf("%s-%d", name, i), map[string]string{prefix + "mode": "rdma-shared"})
			p.Spec.NodeName = "no-such-node"
			got, err := h.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
			if err != nil {
				last = "refused: " + err.Error()
			} else {
				last = got.Annotations[prefix+"memlock"]
			}
			if ok(last) || time.Since(start) > configInEffectTimeout {
				return last, time.Since(start).Seconds()
			}
			tick := time.NewTimer(500 * time.Millisecond)
			select {
			case <-tick.C:
			case <-ctx.Done():
				return last, time.Since(start).Seconds()
			}
		}
	}
	// The installed config's memlock (the chart's default follows the agent's
	// cap), which the rollback must bring back.
	original, _ := probeUntil("probe-original", func(v string) bool { return v != "" && !strings.HasPrefix(v, "refused") })
	check(t, r, original != "" && original != "4Mi" && !strings.HasPrefix(original, "refused"),
		"a pod admitted before the upgrade has memlock %q, want the installed config's value (not 4Mi)", original)
	start := time.Now()
	out, err := h.helmCluster(ctx, "--set", "image.tag=e2e-upgrade", "--set", "webhook.config.memlock=4Mi")
	r.Figures["upgrade_seconds"] = time.Since(start).Seconds()
	check(t, r, err == nil, "helm upgrade: %v %s", err, out)
	if pods, err := h.webhookPods(ctx); err == nil {
		for _, p := range pods {
			check(t, r, strings.HasSuffix(p.Spec.Containers[0].Image, ":e2e-upgrade"), "after the upgrade webhook pod %s runs %s", p.Name, p.Spec.Containers[0].Image)
		}
	}
	afterUpgrade, secs := probeUntil("probe-upgraded", func(v string) bool { return v == "4Mi" })
	r.Figures["new_config_in_effect_after_upgrade_seconds"] = secs
	start = time.Now()
	out, err = run(ctx, h.helm, "rollback", release, "--namespace", releaseNS, "--wait", "--timeout", "5m")
	r.Figures["rollback_seconds"] = time.Since(start).Seconds()
	check(t, r, err == nil, "helm rollback: %v %s", err, out)
	afterRollback, secs := probeUntil("probe-rolled-back", func(v string) bool { return v == original })
	r.Figures["old_config_in_effect_after_rollback_seconds"] = secs
	c.finish(ctx, t, r)
	// The agents rolled twice: how long after the rollback each node
	// advertises its devices again (the DaemonSet counts a new agent Ready
	// before the kubelet has its devices).
	start = time.Now()
	for node, want := range clusterAllocatable {
		got, err := h.waitAdvertised(ctx, node, exclusiveRes, 2*time.Minute, func(v int64) bool { return v == want[exclusiveRes] })
		check(t, r, err == nil, "after the rollback %s allocatable %s is %d, want %d", node, exclusiveRes, got, want[exclusiveRes])
	}
	r.Figures["allocatable_back_after_rollback_seconds"] = time.Since(start).Seconds()
	// Images of the webhook after rollback are the original tag again.
	pods, _ := h.webhookPods(ctx)
	for _, p := range pods {
		check(t, r, strings.HasSuffix(p.Spec.Containers[0].Image, ":dev"), "after rollback webhook pod %s runs %s", p.Name, p.Spec.Containers[0].Image)
	}
	r.Notes = append(r.Notes, fmt.Sprintf("memlock annotation after upgrade %q, after rollback %q", afterUpgrade, afterRollback))
	check(t, r, afterUpgrade == "4Mi", "a pod admitted after the upgrade has memlock %q, want the new config's 4Mi", afterUpgrade)
	check(t, r, afterRollback == original, "a pod admitted after the rollback has memlock %q, want the original config's %q", afterRollback, original)
	_ = h.cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{})
}

// c7: the ND node's kubelet restarted 20 times in a row: each time the
// agent registers again and allocatable is intact.
func testKubeletRestarts(ctx context.Context, t *testing.T, r *Result) {
	const restarts = 20
	want := map[corev1.ResourceName]int64{}
	for _, res := range []corev1.ResourceName{exclusiveRes, sharedRes} {
		v, err := h.waitNodeAllocatable(ctx, ndNode, res, 2*time.Minute, func(v int64) bool {
			return v > 0 && (res != exclusiveRes || v == clusterAllocatable[ndNode][exclusiveRes])
		})
		if err != nil {
			fail(t, r, "before: %s allocatable %s = %d (%v)", ndNode, res, v, err)
		}
		want[res] = v
	}
	pluginDir := filepath.Join(h.e2eDir, "nodes/nd/kubelet/device-plugins")
	var times, afterSocket []float64
	reregistered := 0
	for i := 0; i < restarts; i++ {
		start := time.Now()
		if out, err := h.clusterSh(ctx, "restart-kubelet", "nd"); err != nil {
			fail(t, r, "restart %d: %v %s", i+1, err, out)
		}
		socketBack := time.Now()
		// The kubelet wiped its directory before re-creating kubelet.sock:
		// the agent's socket there again means it registered anew; the
		// Node status must be one the new kubelet wrote.
		err := h.waitKubeletBack(ctx, ndNode, pluginDir, exclusiveRes, start, want, 2*time.Minute)
		if !expect(t, r, err == nil, "restart %d: %v", i+1, err) {
			continue
		}
		reregistered++
		times = append(times, time.Since(start).Seconds())
		afterSocket = append(afterSocket, time.Since(socketBack).Seconds())
	}
	sort.Float64s(times)
	sort.Float64s(afterSocket)
	r.Figures["restarts"] = restarts
	r.Figures["reregistrations"] = float64(reregistered)
	if len(times) > 0 {
		r.Figures["allocatable_back_seconds_median"] = times[len(times)/2]
		r.Figures["allocatable_back_seconds_max"] = times[len(times)-1]
		r.Figures["allocatable_back_seconds_min"] = times[0]
		r.Figures["back_after_kubelet_socket_seconds_median"] = afterSocket[len(afterSocket)/2]
		r.Figures["back_after_kubelet_socket_seconds_max"] = afterSocket[len(afterSocket)-1]
	}
	check(t, r, reregistered == restarts, "%d of %d restarts re-registered with allocatable intact", reregistered, restarts)
}

// c8: the node holding a webhook replica is lost (kubelet, containerd and its
// containers killed) during a burst of creations. Every admitted pod must be
// mutated (failurePolicy Fail); refusals are counted and reported (goal 0).
func testNodeLost(ctx context.Context, t *testing.T, r *Result) {
	const ns = "c8-node-lost"
	optedIn(ctx, t, ns, true)
	pods, err := h.webhookPods(ctx)
	if err != nil || len(pods) < 2 {
		fail(t, r, "want 2 webhook replicas, have %d (%v)", len(pods), err)
	}
	victim := pods[0].Spec.NodeName
	r.Notes = append(r.Notes, fmt.Sprintf("lost node %s (webhook pod %s)", victim, pods[0].Name))
	c := startCreator(ctx, ns, 100*time.Millisecond)
	t.Cleanup(func() {
		// The node comes back for the scenarios after this one and for down.
		cctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		if out, err := h.clusterSh(cctx, "start-node", strings.TrimPrefix(victim, "ibkc-")); err != nil {
			t.Errorf("bring %s back: %v %s", victim, err, out)
		}
	})
	lost := time.Now()
	if out, err := h.clusterSh(ctx, "stop-node", strings.TrimPrefix(victim, "ibkc-")); err != nil {
		close(c.stop)
		<-c.done
		fail(t, r, "stop %s: %v %s", victim, err, out)
	}
	// Until the node is NotReady and its webhook pod has left the Service's
	// endpoints, plus 10 s of creations after that.
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := h.cs.CoreV1().Pods(releaseNS).Get(ctx, pods[0].Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, nil // a slow answer is no news of the replica
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				return c.Status != corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	r.Figures["replica_not_ready_after_seconds"] = time.Since(lost).Seconds()
	check(t, r, err == nil, "the lost node's webhook pod still Ready after 3m: %v", err)
	tail := time.NewTimer(10 * time.Second)
	select {
	case <-tail.C:
	case <-ctx.Done():
	}
	c.finish(ctx, t, r)
	_ = h.cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{})
}

// servesSocket tells whether dir holds a plugin socket of resource (each
// server start of the agent has a name of its own).
func servesSocket(dir, resource string) bool {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if deviceplugin.IsSocketOf(resource, e.Name()) {
			return true
		}
	}
	return false
}
