//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/internal/testing/suitetest"
	cordonwait "github.com/ibkube/ibkube/test/e2e/cordon"
)

// The cluster's InfiniBand partitions (cluster.sh): hb and hb2 are two VMs
// of one HB scale set (tenant key 0x8014, one HCA each), nd a VM of another
// (0x800b, eight HCAs); the OCI node is RoCE only and, with no
// partitionLabelFrom configured, gets "roce".
const (
	hb2Node = "ibkc-hb2" // HB120rs_v3 like hb, served by the device plugin

	partitionND = "0x800b"
	partitionHB = "0x8014"
	// The HB fixture's one HCA and port, whose table c16 reprograms.
	hbHCA  = "mlx5_0"
	hbPort = 1
	// The image the 32-pod figure runs: nothing but a pause.
	pauseImage = "docker.io/library/ibkube-pause:dev"
)

var clusterPartitions = map[string]string{ndNode: partitionND, hbNode: partitionHB, hb2Node: partitionHB, ociNode: "roce"}

// labelWatch records when each Node first carries the partition label, as
// a watch sees it.
type labelWatch struct {
	mu   sync.Mutex
	seen map[string]time.Time
	val  map[string]string
}

// startLabelWatch watches the Nodes until ctx ends (a closed watch is
// opened again).
func startLabelWatch(ctx context.Context) *labelWatch {
	lw := &labelWatch{seen: map[string]time.Time{}, val: map[string]string{}}
	go func() {
		for ctx.Err() == nil {
			w, err := h.cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
			if err != nil {
				time.Sleep(200 * time.Millisecond) // the API server is back within a retry or two
				continue
			}
			for ev := range w.ResultChan() {
				n, ok := ev.Object.(*corev1.Node)
				if !ok || ev.Type == watch.Deleted {
					continue
				}
				now := time.Now()
				if v, ok := n.Labels[contract.LabelPartition]; ok {
					lw.mu.Lock()
					if _, had := lw.seen[n.Name]; !had {
						lw.seen[n.Name] = now
						lw.val[n.Name] = v
					}
					lw.mu.Unlock()
				}
			}
		}
	}()
	return lw
}

func (lw *labelWatch) get(node string) (time.Time, string, bool) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	t, ok := lw.seen[node]
	return t, lw.val[node], ok
}

// agentStart is when the agent container on node started: the container
// runtime's timestamp of its first log line (nanoseconds) and the
// kubelet's startedAt (whole seconds).
func agentStart(ctx context.Context, node string) (firstLog, started time.Time, err error) {
	l, err := h.cs.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/component=node-agent", FieldSelector: "spec.nodeName=" + node,
	})
	if err != nil {
		return firstLog, started, err
	}
	for _, p := range l.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == "agent" && cs.State.Running != nil {
				started = cs.State.Running.StartedAt.Time
			}
		}
		raw, err := h.cs.CoreV1().Pods(releaseNS).GetLogs(p.Name, &corev1.PodLogOptions{Container: "agent", Timestamps: true, LimitBytes: ptr.To[int64](4096)}).DoRaw(ctx)
		if err != nil {
			return firstLog, started, fmt.Errorf("logs of %s: %w", p.Name, err)
		}
		line, _, _ := strings.Cut(string(raw), "\n")
		ts, _, _ := strings.Cut(line, " ")
		firstLog, err = time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			return firstLog, started, fmt.Errorf("first log line of %s: %q: %w", p.Name, line, err)
		}
		return firstLog, started, nil
	}
	return firstLog, started, fmt.Errorf("no agent pod on %s", node)
}

// partitionLabelFigures (in c1) is the time from each agent's start to its
// Node's partition label appearing in a watch opened before the install.
// Goal: 5 s.
func partitionLabelFigures(ctx context.Context, t *testing.T, r *Result, lw *labelWatch) {
	t.Helper()
	worst := 0.0
	for node, want := range clusterPartitions {
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			_, _, ok := lw.get(node)
			return ok, nil
		})
		seen, got, _ := lw.get(node)
		if !expect(t, r, err == nil && got == want, "node %s: partition label %q within a minute of install, want %q", node, got, want) {
			continue
		}
		first, started, err := agentStart(ctx, node)
		if !expect(t, r, err == nil, "agent start on %s: %v", node, err) {
			continue
		}
		short := strings.TrimPrefix(node, "ibkc-")
		d := seen.Sub(first).Seconds()
		r.Figures["partition_label_after_agent_first_log_seconds_"+short] = d
		r.Figures["partition_label_after_container_started_seconds_"+short] = seen.Sub(started).Seconds()
		worst = math.Max(worst, d)
	}
	r.Figures["partition_label_after_agent_start_seconds_max"] = worst
	if worst > 5 {
		r.Notes = append(r.Notes, fmt.Sprintf("goal 5 s missed: a partition label came %.1f s after its agent's first log line", worst))
	}
}

// c11: every node's agent labels its own Node with the partition its
// fixture's tables name.
func testPartitionLabels(ctx context.Context, t *testing.T, r *Result) {
	for node, want := range clusterPartitions {
		got := ""
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			got = nodePartition(ctx, node)
			return got == want, nil
		})
		check(t, r, err == nil, "node %s: partition label %q, want %q", node, got, want)
		r.Notes = append(r.Notes, fmt.Sprintf("%s: %s=%s", node, contract.LabelPartition, got))
	}
}

func nodePartition(ctx context.Context, node string) string {
	n, err := h.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return n.Labels[contract.LabelPartition]
}

// cordon marks nodes unschedulable (or schedulable again).
func cordon(ctx context.Context, on bool, nodes ...string) error {
	for _, n := range nodes {
		patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)
		if _, err := h.cs.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("cordon %s=%t: %w", n, on, err)
		}
	}
	return nil
}

// cordonSeenTimeout bounds cordonFor's wait. The scheduler shows a cordon
// within a second on a quiet machine; beside two busy workers each probe's
// round (create, a scheduling cycle, delete) took a few seconds.
const cordonSeenTimeout = 2 * time.Minute

// placeTimeout bounds the partition scenarios' waits for a job's pods to be
// placed: seconds on a quiet machine (second_pod_placed_seconds), and the
// scheduler retries a pod it found unschedulable only on a cluster event or
// after its backoff (up to 10 s), possibly several times on a busy one.
const placeTimeout = 3 * time.Minute

// cordonFor cordons nodes and uncordons them when the scenario ends,
// whatever happens to it. It returns once the scheduler has seen the
// cordon (cordon.Wait: probes that may only go to those nodes until one is
// Unschedulable because they "were unschedulable"; a probe bound before the
// scheduler's cache had the cordon is deleted and sent again).
func cordonFor(ctx context.Context, t *testing.T, r *Result, ns string, nodes ...string) {
	t.Helper()
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := cordon(cctx, false, nodes...); err != nil {
			t.Errorf("%v", err)
		}
	})
	if err := cordon(ctx, true, nodes...); err != nil {
		fail(t, r, "%v", err)
	}
	probe := reportPod("cordon-probe", nil)
	probe.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
			Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: nodes,
		}}}},
	}}}
	seen, err := cordonwait.Wait(ctx, h.cs.CoreV1().Pods(ns), probe, 100*time.Millisecond, cordonSeenTimeout)
	if err != nil {
		fail(t, r, "the scheduler has not seen %v cordoned: %v", nodes, err)
	}
	r.Figures["cordon_probes_placed_early"] = float64(seen.PlacedEarly)
}

// exclusiveAnnos: an rdma-exclusive pod of one HCA, the whole of an HB node.
func exclusiveAnnos() map[string]string {
	return map[string]string{prefix + "mode": "rdma-exclusive", prefix + "hcas": "1"}
}

// heavyFiller is a pod bound by hand to node and asking half its memory:
// it makes that node the scheduler's least attractive (NodeResourcesFit's
// LeastAllocated and BalancedAllocation scores) without taking an HCA, so
// without the partition affinity the job's next pod would go elsewhere.
func heavyFiller(ctx context.Context, t *testing.T, r *Result, ns, node string) {
	t.Helper()
	n, err := h.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		fail(t, r, "%v", err)
	}
	mem := n.Status.Allocatable[corev1.ResourceMemory]
	p := reportPod("filler-"+strings.TrimPrefix(node, "ibkc-"), nil)
	p.Spec.NodeName = node
	p.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = *resource.NewQuantity(mem.Value()/2, resource.BinarySI)
	if _, err := h.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		fail(t, r, "create %s: %v", p.Name, err)
	}
	// Running: the kubelet admitted it, and the scheduler's cache has long
	// counted it (it was bound at creation).
	if _, err := h.waitRunning(ctx, ns, p.Name, podStartTimeout); err != nil {
		fail(t, r, "%v", err)
	}
}

// jobPods lists the pods matching sel, placed ones first by name.
func jobPods(ctx context.Context, ns string, sel map[string]string) ([]corev1.Pod, error) {
	l, err := h.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: sel})})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil && !strings.HasPrefix(p.Name, "filler-") {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// unschedulableMsg is the scheduler's Unschedulable message on a pod, "" if
// it has none.
func unschedulableMsg(p *corev1.Pod) string {
	if c := suitetest.Unschedulable(p); c != nil {
		return c.Message
	}
	return ""
}

// waitPlaced waits until n pods of sel are settled, and returns them. A
// pod the scheduler found unschedulable for a passing reason (an HCA an
// earlier scenario's pod still held) is retried by the scheduler, so only
// the state the scenario means counts: bound (placed), or for c14 also
// Pending on the job's pod affinity (pendingOnAffinity).
func waitPlaced(ctx context.Context, ns string, sel map[string]string, n int, settled func(*corev1.Pod) bool, timeout time.Duration) ([]corev1.Pod, error) {
	var pods []corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		var err error
		pods, err = jobPods(ctx, ns, sel)
		if err != nil || len(pods) < n {
			return false, nil
		}
		done := 0
		for i := range pods {
			if settled(&pods[i]) {
				done++
			}
		}
		return done >= n, nil
	})
	return pods, err
}

// placed says whether the scheduler bound the pod.
func placed(p *corev1.Pod) bool { return p.Spec.NodeName != "" }

// pendingOnAffinity says whether the pod is bound, or Pending because the
// job's pod affinity allows no node with room.
func pendingOnAffinity(p *corev1.Pod) bool {
	return placed(p) || strings.Contains(unschedulableMsg(p), "pod affinity")
}

// hasJobAffinity says whether the webhook gave the pod the required term
// on the partition label for its job.
func hasJobAffinity(p *corev1.Pod) bool {
	if p.Spec.Affinity == nil || p.Spec.Affinity.PodAffinity == nil {
		return false
	}
	want := contract.JobSelector(p.Labels)
	for _, term := range p.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		if term.TopologyKey == contract.LabelPartition && term.LabelSelector != nil && equality.Semantic.DeepEqual(term.LabelSelector.MatchLabels, want) {
			return true
		}
	}
	return false
}

// wantKeys checks the partition keys a running job pod was handed: UCX
// the tenant key without the membership bit, NCCL the key's index when
// not 0 (both fixtures hold the tenant key at index 0).
func wantKeys(ctx context.Context, t *testing.T, r *Result, ns string, p *corev1.Pod) {
	t.Helper()
	if _, err := h.waitRunning(ctx, ns, p.Name, podStartTimeout); err != nil {
		check(t, r, false, "%v", err)
		return
	}
	rep, err := h.containerReport(ctx, ns, p.Name, "main")
	if !expect(t, r, err == nil, "%s: %v", p.Name, err) {
		return
	}
	key, _ := strconv.ParseUint(strings.TrimPrefix(clusterPartitions[p.Spec.NodeName], "0x"), 16, 16)
	want := fmt.Sprintf("0x%04x", key&0x7fff)
	check(t, r, rep.Env["UCX_IB_PKEY"] == want, "%s on %s: UCX_IB_PKEY %q, want %q", p.Name, p.Spec.NodeName, rep.Env["UCX_IB_PKEY"], want)
	check(t, r, rep.Env["NCCL_IB_PKEY"] == "", "%s on %s: NCCL_IB_PKEY %q, want none (the tenant key is at index 0)", p.Name, p.Spec.NodeName, rep.Env["NCCL_IB_PKEY"])
	check(t, r, rep.uverbs() == 1, "%s sees %v, want one uverbs device", p.Name, rep.devicePaths())
}

// sameSide are the nodes of a partition other than node.
func sameSide(node string) []string {
	var out []string
	for n, p := range clusterPartitions {
		if n != node && p == clusterPartitions[node] {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// jobOf is a Job of parallelism pods made from a pod's annotations and
// spec, its pods never restarted and the Job never retried: a scenario
// reads each pod's placement as the scheduler first made it.
func jobOf(name string, tmpl *corev1.Pod, parallelism int32) *batchv1.Job {
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: batchv1.JobSpec{
			Parallelism:  ptr.To(parallelism),
			BackoffLimit: ptr.To[int32](0),
			Template:     corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: tmpl.Annotations}, Spec: tmpl.Spec},
		},
	}
}

// c12: a 2-pod Job in rdma-exclusive, one HCA per pod: its first pod is
// kept off the ND node (cordoned), so it takes one of the two HB nodes,
// whichever the scheduler picks; the HB node left is then made the least
// attractive node and the Job grows to 2 pods. The second pod must join
// the first on 0x8014, never go to the emptier ND node on 0x800b.
func testJobOnePartition(ctx context.Context, t *testing.T, r *Result) {
	const ns, name = "c12-job", "train"
	partitionNamespace(ctx, t, ns)
	cordonFor(ctx, t, r, ns, ndNode)
	job := jobOf(name, reportPod("", exclusiveAnnos()), 1)
	if _, err := h.cs.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		fail(t, r, "create job: %v", err)
	}
	sel := map[string]string{batchv1.JobNameLabel: name}
	pods, err := waitPlaced(ctx, ns, sel, 1, placed, placeTimeout)
	if err != nil || len(pods) == 0 || pods[0].Spec.NodeName == "" {
		fail(t, r, "the job's first pod is not placed: %v (%v)", err, podsWhy(pods))
	}
	first := pods[0]
	check(t, r, hasJobAffinity(&first), "%s: no required pod affinity on %s for job %s: %+v", first.Name, contract.LabelPartition, name, first.Spec.Affinity)
	if clusterPartitions[first.Spec.NodeName] != partitionHB {
		fail(t, r, "first pod on %s, with ND cordoned it must take an HB node", first.Spec.NodeName)
	}
	left := sameSide(first.Spec.NodeName)[0]
	if err := cordon(ctx, false, ndNode); err != nil {
		fail(t, r, "%v", err)
	}
	heavyFiller(ctx, t, r, ns, left)
	start := time.Now()
	if _, err := h.cs.BatchV1().Jobs(ns).Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"parallelism":2}}`), metav1.PatchOptions{}); err != nil {
		fail(t, r, "grow the job: %v", err)
	}
	pods, err = waitPlaced(ctx, ns, sel, 2, placed, placeTimeout)
	r.Figures["second_pod_placed_seconds"] = time.Since(start).Seconds()
	if err != nil {
		fail(t, r, "the job's second pod is not placed: %v (%v)", err, podsWhy(pods))
	}
	onePartition(ctx, t, r, ns, pods, first.Spec.NodeName, left)
	deleteJob(ctx, t, ns, name)
}

// onePartition checks that the pods run on the first pod's partition, the
// second on want (the node left there).
func onePartition(ctx context.Context, t *testing.T, r *Result, ns string, pods []corev1.Pod, firstNode, want string) {
	t.Helper()
	for i := range pods {
		p := &pods[i]
		r.Notes = append(r.Notes, fmt.Sprintf("%s on %s (%s)", p.Name, nodeOf(p), clusterPartitions[nodeOf(p)]))
		if p.Spec.NodeName == firstNode {
			wantKeys(ctx, t, r, ns, p)
			continue
		}
		if !expect(t, r, p.Spec.NodeName != "", "%s is not placed: %s", p.Name, unschedulableMsg(p)) {
			continue
		}
		check(t, r, clusterPartitions[p.Spec.NodeName] == clusterPartitions[firstNode],
			"split: %s on %s (%s), the first pod on %s (%s)", p.Name, p.Spec.NodeName, clusterPartitions[p.Spec.NodeName], firstNode, clusterPartitions[firstNode])
		check(t, r, p.Spec.NodeName == want, "%s on %s, want %s", p.Name, p.Spec.NodeName, want)
		wantKeys(ctx, t, r, ns, p)
	}
}

func podsWhy(pods []corev1.Pod) []string {
	var out []string
	for i := range pods {
		out = append(out, pods[i].Name+": "+nodeOf(&pods[i])+" "+podWhy(&pods[i]))
	}
	return out
}

// partitionNamespace creates an opted-in namespace whose jobs and pods
// are deleted when the scenario ends, however it ends, so a failed
// scenario leaves no HCA held for the next.
func partitionNamespace(ctx context.Context, t *testing.T, ns string) {
	t.Helper()
	optedIn(ctx, t, ns, false)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		_ = h.cs.BatchV1().Jobs(ns).DeleteCollection(cctx, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}, metav1.ListOptions{})
		deleteJob(cctx, t, ns, "")
	})
}

// deleteJob deletes a Job (name "": none) and every pod of ns, and waits
// until the pods are gone, so the next scenario finds the HCAs free.
func deleteJob(ctx context.Context, t *testing.T, ns, name string) {
	t.Helper()
	if name != "" {
		_ = h.cs.BatchV1().Jobs(ns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
	}
	_ = h.cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := h.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 0, nil
	})
	if err != nil {
		t.Logf("pods of %s/%s still there: %v", ns, name, err)
	}
}

// jobSetPod is a pod as the JobSet controller's child Job index idx would
// create it: the JobSet labels (sigs.k8s.io/jobset api/jobset/v1alpha2)
// and its own child Job's batch labels, so the pods of one JobSet belong
// to two different Jobs. The JobSet controller itself is not installed
// (it needs its webhooks and certificates); the webhook sees the same pod.
func jobSetPod(jobset, rjob string, idx int) *corev1.Pod {
	p := reportPod(fmt.Sprintf("%s-%s-%d-0", jobset, rjob, idx), exclusiveAnnos())
	child := fmt.Sprintf("%s-%s-%d", jobset, rjob, idx)
	p.Labels = map[string]string{
		"jobset.sigs.k8s.io/jobset-name":            jobset,
		"jobset.sigs.k8s.io/replicatedjob-name":     rjob,
		"jobset.sigs.k8s.io/replicatedjob-replicas": "2",
		"jobset.sigs.k8s.io/job-index":              strconv.Itoa(idx),
		"jobset.sigs.k8s.io/job-global-index":       strconv.Itoa(idx),
		"jobset.sigs.k8s.io/restart-attempt":        "0",
		batchv1.JobNameLabel:                        child,
		"job-name":                                  child,
	}
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	return p
}

// c13: a 2-pod JobSet (two child Jobs of one pod) in rdma-exclusive: its
// first pod is kept off the HB nodes (cordoned), so it takes ND; ND is then
// made the least attractive node and the second pod comes. It must join
// the first on 0x800b, never go to an emptier HB node on 0x8014.
func testJobSetOnePartition(ctx context.Context, t *testing.T, r *Result) {
	const ns = "c13-jobset"
	partitionNamespace(ctx, t, ns)
	cordonFor(ctx, t, r, ns, hbNode, hb2Node)
	sel := map[string]string{"jobset.sigs.k8s.io/jobset-name": "js"}
	if _, err := h.cs.CoreV1().Pods(ns).Create(ctx, jobSetPod("js", "workers", 0), metav1.CreateOptions{}); err != nil {
		fail(t, r, "create: %v", err)
	}
	pods, err := waitPlaced(ctx, ns, sel, 1, placed, placeTimeout)
	if err != nil || len(pods) == 0 || pods[0].Spec.NodeName == "" {
		fail(t, r, "the JobSet's first pod is not placed: %v (%v)", err, podsWhy(pods))
	}
	first := pods[0]
	check(t, r, hasJobAffinity(&first), "%s: no required pod affinity on %s for the JobSet: %+v", first.Name, contract.LabelPartition, first.Spec.Affinity)
	if first.Spec.NodeName != ndNode {
		fail(t, r, "first pod on %s, with the HB nodes cordoned it must take ND", first.Spec.NodeName)
	}
	if err := cordon(ctx, false, hbNode, hb2Node); err != nil {
		fail(t, r, "%v", err)
	}
	heavyFiller(ctx, t, r, ns, ndNode)
	start := time.Now()
	if _, err := h.cs.CoreV1().Pods(ns).Create(ctx, jobSetPod("js", "workers", 1), metav1.CreateOptions{}); err != nil {
		fail(t, r, "create: %v", err)
	}
	pods, err = waitPlaced(ctx, ns, sel, 2, placed, placeTimeout)
	r.Figures["second_pod_placed_seconds"] = time.Since(start).Seconds()
	if err != nil {
		fail(t, r, "the JobSet's second pod is not placed: %v (%v)", err, podsWhy(pods))
	}
	onePartition(ctx, t, r, ns, pods, ndNode, ndNode)
	deleteJob(ctx, t, ns, "")
}

// c14: a 3-pod Job of one HCA per pod when ND has one HCA free (a pod
// holds the other seven): three free HCAs in the cluster, but at most two
// on one partition (the HB pair). The job must not split: at least one pod
// stays Pending with the scheduler's pod affinity reason, and the running
// ones share a partition.
func testJobNoPartitionFits(ctx context.Context, t *testing.T, r *Result) {
	const ns, name = "c14-no-fit", "big"
	partitionNamespace(ctx, t, ns)
	hold := placementPod("filler-nd", map[corev1.ResourceName]int64{exclusiveRes: 7}, nil)
	hold.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": ndNode}
	if _, err := h.cs.CoreV1().Pods(ns).Create(ctx, hold, metav1.CreateOptions{}); err != nil {
		fail(t, r, "create %s: %v", hold.Name, err)
	}
	if _, err := h.waitRunning(ctx, ns, hold.Name, podStartTimeout); err != nil {
		fail(t, r, "%v", err)
	}
	job := jobOf(name, reportPod("", exclusiveAnnos()), 3)
	if _, err := h.cs.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		fail(t, r, "create job: %v", err)
	}
	sel := map[string]string{batchv1.JobNameLabel: name}
	pods, err := waitPlaced(ctx, ns, sel, 3, pendingOnAffinity, placeTimeout)
	if err != nil {
		fail(t, r, "the job's pods are neither placed nor Pending on the pod affinity: %v (%v)", err, podsWhy(pods))
	}
	parts := map[string]bool{}
	pending := 0
	var waiting []string
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName != "" {
			parts[clusterPartitions[p.Spec.NodeName]] = true
			r.Notes = append(r.Notes, fmt.Sprintf("%s on %s (%s)", p.Name, p.Spec.NodeName, clusterPartitions[p.Spec.NodeName]))
			continue
		}
		pending++
		waiting = append(waiting, p.Name)
		msg := unschedulableMsg(p)
		r.Notes = append(r.Notes, fmt.Sprintf("%s Pending: %s", p.Name, msg))
		check(t, r, strings.Contains(msg, "pod affinity"), "%s Pending without the pod affinity reason: %q", p.Name, msg)
	}
	r.Figures["pods_placed"] = float64(len(pods) - pending)
	r.Figures["pods_pending"] = float64(pending)
	r.Figures["partitions"] = float64(len(parts))
	check(t, r, pending >= 1, "all %d pods placed: the job fits no single partition, so it must wait", len(pods))
	check(t, r, len(parts) <= 1, "the job is split over partitions %v", parts)
	// Still Pending after the placed pods started (the scheduler retried
	// with every change those brought).
	for i := range pods {
		if pods[i].Spec.NodeName != "" {
			_, _ = h.waitRunning(ctx, ns, pods[i].Name, podStartTimeout)
		}
	}
	for _, name := range waiting {
		p, err := h.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		check(t, r, err == nil && p.Spec.NodeName == "", "%s was placed later, on %s (%v)", name, nodeOf(p), err)
	}
	deleteJob(ctx, t, ns, name)
}

// c15: a job whose pods were placed by hand (nodeName) on ND (0x800b) and
// hb2 (0x8014) raises RDMAJobSplit on each pod, naming the job, both
// partitions and both nodes, within one counters period of both running.
func testJobSplitEvent(ctx context.Context, t *testing.T, r *Result) {
	const ns = "c15-split"
	partitionNamespace(ctx, t, ns)
	periodS, _, err := counterValues(ctx)
	if err != nil {
		fail(t, r, "%v", err)
	}
	period, err := time.ParseDuration(periodS)
	if err != nil {
		fail(t, r, "agent.counters.period %q: %v", periodS, err)
	}
	placed := map[string]string{"split-worker-0": ndNode, "split-worker-1": hb2Node}
	for name, node := range placed {
		p := reportPod(name, exclusiveAnnos())
		p.Labels = map[string]string{"training.kubeflow.org/job-name": "split", "training.kubeflow.org/replica-type": "worker"}
		p.Spec.NodeName = node
		if _, err := h.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			fail(t, r, "create %s: %v", name, err)
		}
	}
	for name := range placed {
		if _, err := h.waitRunning(ctx, ns, name, podStartTimeout); err != nil {
			fail(t, r, "%v", err)
		}
	}
	running := time.Now()
	for name, node := range placed {
		var msg string
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*period+30*time.Second, true, func(ctx context.Context) (bool, error) {
			l, err := h.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + name + ",reason=RDMAJobSplit"})
			if err != nil || len(l.Items) == 0 {
				return false, nil
			}
			msg = l.Items[0].Message
			return true, nil
		})
		secs := time.Since(running).Seconds()
		r.Figures["event_after_running_seconds_"+strings.TrimPrefix(node, "ibkc-")] = secs
		if !expect(t, r, err == nil, "no RDMAJobSplit Event on %s (on %s) within %s", name, node, 2*period+30*time.Second) {
			continue
		}
		r.Notes = append(r.Notes, name+": "+msg)
		for _, want := range []string{"training.kubeflow.org/job-name=split", partitionND, partitionHB, ndNode, hb2Node} {
			check(t, r, strings.Contains(msg, want), "%s: the Event does not name %s: %q", name, want, msg)
		}
		// Within one counters period of both running; a few seconds more
		// for the Event to reach the API on this loaded machine.
		check(t, r, secs <= period.Seconds()+5, "%s: the Event came %.1f s after both pods ran, more than one counters period (%s)", name, secs, period)
	}
	r.Figures["counters_period_seconds"] = period.Seconds()
	deleteJob(ctx, t, ns, "")
}

// c16: the webhook leaves a job pod's own placement alone: a pod stating
// its own pod affinity on the partition label (preferred, or required with
// its own selector) and a pod opting out with placement: any are stored
// as sent; a sibling job pod stating nothing gets the required term.
func testOwnAffinityLeftAlone(ctx context.Context, t *testing.T, r *Result) {
	const ns = "c16-own-affinity"
	partitionNamespace(ctx, t, ns)
	own := func(name string, a *corev1.Affinity, annos map[string]string) *corev1.Pod {
		an := exclusiveAnnos()
		for k, v := range annos {
			an[k] = v
		}
		p := reportPod(name, an)
		p.Labels = map[string]string{batchv1.JobNameLabel: name}
		p.Spec.Affinity = a
		// Stored, never placed: no node has this label.
		p.Spec.NodeSelector = map[string]string{"ibkube.io/e2e-node": "none"}
		return p
	}
	preferred := &corev1.Affinity{PodAffinity: &corev1.PodAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
		Weight: 50, PodAffinityTerm: corev1.PodAffinityTerm{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{batchv1.JobNameLabel: "own-preferred"}},
			TopologyKey:   contract.LabelPartition,
		},
	}}}}
	required := &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "vision"}},
		TopologyKey:   contract.LabelPartition,
	}}}}
	cases := []struct {
		pod  *corev1.Pod
		kept bool // affinity stored exactly as sent
	}{
		{own("own-preferred", preferred, nil), true},
		{own("own-required", required, nil), true},
		{own("placement-any", nil, map[string]string{prefix + "placement": "any"}), true},
		{own("sibling", nil, nil), false},
	}
	for _, c := range cases {
		sent := c.pod.Spec.Affinity.DeepCopy()
		got, err := h.cs.CoreV1().Pods(ns).Create(ctx, c.pod, metav1.CreateOptions{})
		if !expect(t, r, err == nil, "create %s: %v", c.pod.Name, err) {
			continue
		}
		check(t, r, got.Annotations[prefix+"injected"] != "", "%s: not mutated by the webhook (no injected annotation)", got.Name)
		if c.kept {
			check(t, r, equality.Semantic.DeepEqual(got.Spec.Affinity, sent), "%s: affinity changed: sent %+v, stored %+v", got.Name, sent, got.Spec.Affinity)
		} else {
			check(t, r, hasJobAffinity(got), "%s: no required pod affinity on %s for its job: %+v", got.Name, contract.LabelPartition, got.Spec.Affinity)
		}
	}
	deleteJob(ctx, t, ns, "")
}

// c17: hb2's partition table is reprogrammed in its fixture as a subnet
// manager would (sysfs emits no inotify event for pkeys, and the agent
// watches only the dev tree): the label follows at the agent's periodic
// rescan (10 s), to a new key, then to none when the port keeps only the
// default key (no certain partition), then back.
func testLabelFollowsFixture(ctx context.Context, t *testing.T, r *Result) {
	dir := fixtureOf(hb2Node)
	restore := func() error { return fixture.SetPKeys(dir, hbHCA, hbPort, partitionHB, "0x7fff") }
	t.Cleanup(func() {
		if err := restore(); err != nil {
			t.Errorf("restore the partition table of %s: %v", hb2Node, err)
		}
	})
	steps := []struct {
		name string
		keys []string
		want string // "" : no label
	}{
		{"new_key", []string{"0x8016", "0x7fff"}, "0x8016"},
		{"default_only", []string{"0x7fff"}, ""},
		{"back", []string{partitionHB, "0x7fff"}, partitionHB},
	}
	for _, s := range steps {
		start := time.Now()
		if err := fixture.SetPKeys(dir, hbHCA, hbPort, s.keys...); err != nil {
			fail(t, r, "%v", err)
		}
		got := "?"
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			n, err := h.cs.CoreV1().Nodes().Get(ctx, hb2Node, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			got = n.Labels[contract.LabelPartition]
			return got == s.want, nil
		})
		secs := time.Since(start).Seconds()
		r.Figures["label_followed_seconds_"+s.name] = secs
		check(t, r, err == nil, "%s: table %v: label %q after a minute, want %q", s.name, s.keys, got, s.want)
		r.Notes = append(r.Notes, fmt.Sprintf("pkeys %v -> label %q after %.1f s", s.keys, got, secs))
	}
}

// schedMetrics reads the kube-scheduler's attempt duration histogram:
// sum and count of the scheduled attempts, count of the unschedulable
// ones.
func schedMetrics(ctx context.Context) (sum, count, unsched float64, err error) {
	out, err := h.clusterSh(ctx, "scheduler-metrics")
	if err != nil {
		return 0, 0, 0, err
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(line, "{")
		if !ok {
			continue
		}
		labels, val, _ := strings.Cut(rest, "} ")
		v, perr := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if perr != nil {
			continue
		}
		switch {
		case name == "scheduler_scheduling_attempt_duration_seconds_sum" && strings.Contains(labels, `result="scheduled"`):
			sum += v
		case name == "scheduler_scheduling_attempt_duration_seconds_count" && strings.Contains(labels, `result="scheduled"`):
			count += v
		case name == "scheduler_scheduling_attempt_duration_seconds_count" && strings.Contains(labels, `result="unschedulable"`):
			unsched += v
		}
	}
	return sum, count, unsched, sc.Err()
}

// boundWatch records when each pod of a Job is first seen bound, through
// an informer (it lists again and re-watches whenever its watch ends).
type boundWatch struct {
	mu    sync.Mutex
	bound map[string]string
	last  time.Time
	full  chan struct{}
	stop  context.CancelFunc
}

func watchBound(ctx context.Context, ns, job string, want int) *boundWatch {
	ctx, cancel := context.WithCancel(ctx)
	bw := &boundWatch{bound: map[string]string{}, full: make(chan struct{}), stop: cancel}
	f := informers.NewSharedInformerFactoryWithOptions(h.cs, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = batchv1.JobNameLabel + "=" + job }))
	inf := f.Core().V1().Pods().Informer()
	see := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Spec.NodeName == "" {
			return
		}
		now := time.Now()
		bw.mu.Lock()
		defer bw.mu.Unlock()
		if _, had := bw.bound[p.Name]; had {
			return
		}
		bw.bound[p.Name] = p.Spec.NodeName
		bw.last = now
		if len(bw.bound) == want {
			close(bw.full)
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: see, UpdateFunc: func(_, o any) { see(o) }})
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	return bw
}

// wait returns the bound pods' nodes and when the last was seen, once all
// are bound or after timeout.
func (bw *boundWatch) wait(ctx context.Context, timeout time.Duration) (map[string]string, time.Time) {
	defer bw.stop()
	tm := time.NewTimer(timeout)
	defer tm.Stop()
	select {
	case <-bw.full:
	case <-tm.C:
	case <-ctx.Done():
	}
	bw.mu.Lock()
	defer bw.mu.Unlock()
	out := make(map[string]string, len(bw.bound))
	for k, v := range bw.bound {
		out[k] = v
	}
	return out, bw.last
}

// c18 (figure): scheduling time of a 32-pod Job of rdma-shared pause pods
// on the device-plugin InfiniBand nodes (ND, hb2: 63 shared slots each, on
// different partitions), with the webhook's partition affinity and without
// it (placement: any), alternated over four rounds: wall time from the Job's
// creation to its 32nd pod bound, seen in a watch, and the scheduler's own
// mean attempt duration.
func testScheduling32(ctx context.Context, t *testing.T, r *Result) {
	const ns, pods, rounds = "c18-sched32", 32, 4
	partitionNamespace(ctx, t, ns)
	wall := map[string][]float64{}
	attempt := map[string][]float64{}
	for round := 0; round < rounds; round++ {
		for _, variant := range []string{"affinity", "any"} {
			name := fmt.Sprintf("%s-%d", variant, round)
			annos := map[string]string{prefix + "mode": "rdma-shared"}
			if variant == "any" {
				annos[prefix+"placement"] = "any"
			}
			tmpl := reportPod("", annos)
			tmpl.Spec.Containers[0].Image = pauseImage
			tmpl.Spec.NodeSelector = map[string]string{"infiniband.azure.com/allocation": "deviceplugin"}
			job := jobOf(name, tmpl, pods)
			job.Spec.Completions = ptr.To[int32](pods)
			seen := watchBound(ctx, ns, name, pods)
			s0, c0, u0, merr := schedMetrics(ctx)
			start := time.Now()
			if _, err := h.cs.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
				seen.stop()
				fail(t, r, "create job %s: %v", name, err)
			}
			bound, last := seen.wait(ctx, 5*time.Minute)
			s1, c1, u1, merr2 := schedMetrics(ctx)
			if !expect(t, r, len(bound) == pods, "%s: %d of %d pods bound", name, len(bound), pods) {
				deleteJob(ctx, t, ns, name)
				continue
			}
			secs := last.Sub(start).Seconds()
			wall[variant] = append(wall[variant], secs)
			nodes := map[string]int{}
			parts := map[string]bool{}
			for _, n := range bound {
				nodes[n]++
				parts[clusterPartitions[n]] = true
			}
			if variant == "affinity" {
				check(t, r, len(parts) == 1, "%s: the job's pods are on partitions %v", name, parts)
			}
			note := fmt.Sprintf("%s: 32 pods bound in %.2f s on %v", name, secs, nodes)
			if merr == nil && merr2 == nil && c1 > c0 {
				ms := (s1 - s0) / (c1 - c0) * 1000
				attempt[variant] = append(attempt[variant], ms)
				note += fmt.Sprintf("; scheduler: %.0f scheduled attempts, mean %.2f ms, %.0f unschedulable", c1-c0, ms, u1-u0)
			} else {
				note += fmt.Sprintf("; scheduler metrics unavailable: %v %v", merr, merr2)
			}
			r.Notes = append(r.Notes, note)
			deleteJob(ctx, t, ns, name)
		}
	}
	mean := func(v []float64) float64 {
		s := 0.0
		for _, x := range v {
			s += x
		}
		return s / float64(len(v))
	}
	if len(wall["affinity"]) > 0 && len(wall["any"]) > 0 {
		a, b := mean(wall["affinity"]), mean(wall["any"])
		r.Figures["sched32_wall_seconds_affinity"] = a
		r.Figures["sched32_wall_seconds_any"] = b
		r.Figures["sched32_wall_ratio"] = a / b
	}
	if len(attempt["affinity"]) > 0 && len(attempt["any"]) > 0 {
		a, b := mean(attempt["affinity"]), mean(attempt["any"])
		r.Figures["sched32_attempt_ms_affinity"] = a
		r.Figures["sched32_attempt_ms_any"] = b
		r.Figures["sched32_attempt_ratio"] = a / b
	}
}
