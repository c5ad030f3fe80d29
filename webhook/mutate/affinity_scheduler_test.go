//go:build integration

package mutate

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/internal/testing/suitetest"
	"github.com/ibkube/ibkube/internal/testing/testenv"
)

// TestSchedulerDecoy runs the job affinity on the real kube-scheduler
// ($KUBE_SCHEDULER, make kube-scheduler) against envtest's kube-apiserver,
// with four nodes on two partitions, one rdma/ib each. A decoy pod of no
// RDMA that carries only the job's name label:
//   - split: rank 0 runs on partition A, A's other node is full, the decoy
//     runs on B: rank 1 must stay Pending, not join the decoy on B;
//   - starve: the decoy runs on B before rank 0, B is full: rank 0 must go
//     to A, not wait for B.
//
// The name-only term (the affinity before the UID labels) is run beside it
// as the control: it splits and starves, so the harness reproduces what it
// guards against.
func TestSchedulerDecoy(t *testing.T) {
	sched := os.Getenv("KUBE_SCHEDULER")
	if sched == "" {
		t.Skip("$KUBE_SCHEDULER is not set: make test-integration-affinity builds kube-scheduler and runs this")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := startScheduler(ctx, t, sched)
	job := map[string]string{contract.JobLabelBatch: "train", contract.JobUIDLabelBatch: "uid-train", contract.JobUIDLabelBatchLegacy: "uid-train"}
	nameOnly := func(l map[string]string) *corev1.PodAffinityTerm {
		term := jobAffinityTerm(l)
		term.MatchLabelKeys = nil
		return term
	}
	for _, tc := range []struct {
		ns       string
		term     func(map[string]string) *corev1.PodAffinityTerm
		protects bool
	}{
		{"uid", jobAffinityTerm, true},
		{"name-only", nameOnly, false},
	} {
		node := splitRank(ctx, t, cs, tc.ns+"-split", job, tc.term(job))
		t.Logf("%s term, split: rank 1 -> %q", tc.ns, node)
		if split := node != ""; split == tc.protects {
			t.Errorf("%s term: rank 1 placed on %q with rank 0 on a-0, its partition full and a decoy on b-0; want %s", tc.ns, node,
				map[bool]string{true: "Pending (never split)", false: "split onto b (the control)"}[tc.protects])
		}
		node = starveRank(ctx, t, cs, tc.ns+"-starve", job, tc.term(job))
		t.Logf("%s term, starve: rank 0 -> %q", tc.ns, node)
		if started := node != ""; started != tc.protects {
			t.Errorf("%s term: rank 0 placed on %q with a decoy on full partition b and a free; want %s", tc.ns, node,
				map[bool]string{true: "a node of a", false: "Pending behind the decoy (the control)"}[tc.protects])
		}
	}
}

// splitRank places rank 0 on a-0, fills a-1, puts the decoy on b-0, and
// returns where rank 1 goes ("" for Pending).
func splitRank(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string, job map[string]string, term *corev1.PodAffinityTerm) string {
	t.Helper()
	mkNamespace(ctx, t, cs, ns)
	defer cleanup(ctx, t, cs, ns)
	create(ctx, t, cs, rdmaPod(ns, "rank-0", job, term, "a-0"))
	create(ctx, t, cs, rdmaPod(ns, "filler-a", nil, nil, "a-1"))
	create(ctx, t, cs, decoy(ns, "b-0"))
	return placement(ctx, t, cs, create(ctx, t, cs, rdmaPod(ns, "rank-1", job, term, "")))
}

// starveRank puts the decoy on b-0 and fills b, and returns where rank 0
// goes ("" for Pending).
func starveRank(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string, job map[string]string, term *corev1.PodAffinityTerm) string {
	t.Helper()
	mkNamespace(ctx, t, cs, ns)
	defer cleanup(ctx, t, cs, ns)
	create(ctx, t, cs, decoy(ns, "b-0"))
	create(ctx, t, cs, rdmaPod(ns, "filler-b0", nil, nil, "b-0"))
	create(ctx, t, cs, rdmaPod(ns, "filler-b1", nil, nil, "b-1"))
	return placement(ctx, t, cs, create(ctx, t, cs, rdmaPod(ns, "rank-0", job, term, "")))
}

// startScheduler runs kube-apiserver (envtest) and the kube-scheduler
// binary sched against it, with four nodes on two partitions (a: 0x8014,
// b: 0x800b), one rdma/ib each, and returns once the scheduler has them.
func startScheduler(ctx context.Context, t *testing.T, sched string) kubernetes.Interface {
	t.Helper()
	env := &envtest.Environment{}
	cfg := testenv.StartEnv(t, "test-integration-affinity", env)
	cs := kubernetes.NewForConfigOrDie(cfg)
	path := testenv.AdminKubeconfig(t, env, "scheduler")
	cmd := exec.CommandContext(ctx, sched, "--kubeconfig="+path, "--leader-elect=false", "--secure-port=0", "-v=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	for i, n := range []string{"a-0", "a-1", "b-0", "b-1"} {
		addNode(ctx, t, cs, n, []string{"0x8014", "0x800b"}[i/2])
	}
	// The scheduler has every node with its rdma/ib once one probe per node,
	// pinned there and holding its rdma/ib, is bound.
	mkNamespace(ctx, t, cs, "probe")
	for _, n := range []string{"a-0", "a-1", "b-0", "b-1"} {
		p := rdmaPod("probe", n, nil, nil, "")
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": n}
		p = create(ctx, t, cs, p)
		// Bound, not a first "unschedulable" while the node is not yet seen.
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			got, err := cs.CoreV1().Pods("probe").Get(ctx, p.Name, metav1.GetOptions{})
			return err == nil && got.Spec.NodeName == n, err
		})
		if err != nil {
			t.Fatalf("probe for %s never bound there: %v", n, err)
		}
	}
	cleanup(ctx, t, cs, "probe")
	return cs
}

func addNode(ctx context.Context, t *testing.T, cs kubernetes.Interface, name, partition string) {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{contract.LabelPartition: partition, "kubernetes.io/hostname": name}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The API server's TaintNodesByCondition admission taints a new Node
	// not-ready; no node lifecycle controller runs here to lift it.
	n.Spec.Taints = nil
	if n, err = cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"),
		corev1.ResourcePods: resource.MustParse("110"), contract.ResourceExclusiveIB: resource.MustParse("1")}
	n.Status = corev1.NodeStatus{Capacity: res, Allocatable: res,
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func mkNamespace(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// rdmaPod holds one rdma/ib, bound to node when it is not "".
func rdmaPod(ns, name string, labels map[string]string, term *corev1.PodAffinityTerm, node string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, AutomountServiceAccountToken: new(bool), Containers: []corev1.Container{{Name: "c", Image: "x",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{contract.ResourceExclusiveIB: resource.MustParse("1")}}}}}}
	if term != nil {
		p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{*term}}}
	}
	return p
}

// decoy is a 100m pod without RDMA carrying only the job's name label.
func decoy(ns, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "decoy", Namespace: ns, Labels: map[string]string{contract.JobLabelBatch: "train"}},
		Spec: corev1.PodSpec{NodeName: node, AutomountServiceAccountToken: new(bool), Containers: []corev1.Container{{Name: "c", Image: "x",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}}}
}

func create(ctx context.Context, t *testing.T, cs kubernetes.Interface, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	got, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// placement waits until the scheduler binds the pod (its node) or reports
// it unschedulable (""); the deadline only bounds a scheduler that never
// answers.
func placement(ctx context.Context, t *testing.T, cs kubernetes.Interface, p *corev1.Pod) string {
	t.Helper()
	var node string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := cs.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if got.Spec.NodeName != "" {
			node = got.Spec.NodeName
			return true, nil
		}
		if c := suitetest.Unschedulable(got); c != nil {
			t.Logf("%s/%s: %s", p.Namespace, p.Name, c.Message)
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s neither bound nor unschedulable: %v", p.Namespace, p.Name, err)
	}
	return node
}

// cleanup deletes the namespace's pods at once, so the next scenario finds
// the nodes free.
func cleanup(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string) {
	t.Helper()
	zero := int64(0)
	if err := cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 0, err
	})
	if err != nil {
		t.Fatal(fmt.Errorf("pods of %s not gone: %w", ns, err))
	}
}
