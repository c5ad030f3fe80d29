//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/ibkube/ibkube/internal/testing/suitetest"
	"github.com/ibkube/ibkube/test/e2e/nodestatus"
)

const (
	nodeName    = "ibk-e2e"
	reportImage = "docker.io/library/ibkube-report:dev"
	prefix      = "infiniband.azure.com/"
)

// ContainerReport is what test/e2e/report prints.
type ContainerReport struct {
	UID          int               `json:"uid"`
	Env          map[string]string `json:"env"`
	CapEff       string            `json:"capEff"`
	Capabilities []string          `json:"capabilities"`
	Memlock      struct {
		Soft int64 `json:"soft"`
		Hard int64 `json:"hard"`
	} `json:"memlock"`
	Devices []struct {
		Path  string `json:"path"`
		Type  string `json:"type"`
		Major uint32 `json:"major"`
		Minor uint32 `json:"minor"`
	} `json:"devices"`
	Interfaces []struct {
		Name  string   `json:"name"`
		Addrs []string `json:"addrs"`
	} `json:"interfaces"`
	NCCLConf *struct {
		Path    string `json:"path"`
		Content string `json:"content"`
	} `json:"ncclConf"`
	Errors []string `json:"errors"`
}

func (c ContainerReport) hasCap(name string) bool {
	for _, n := range c.Capabilities {
		if n == name {
			return true
		}
	}
	return false
}

// uverbs counts the container's uverbs devices.
func (c ContainerReport) uverbs() int {
	n := 0
	for _, d := range c.Devices {
		if strings.Contains(d.Path, "uverbs") {
			n++
		}
	}
	return n
}

func (c ContainerReport) devicePaths() []string {
	var out []string
	for _, d := range c.Devices {
		out = append(out, fmt.Sprintf("%s(%s %d:%d)", d.Path, d.Type, d.Major, d.Minor))
	}
	return out
}

// run runs a command and returns its combined output.
func run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = append(os.Environ(), "KUBECONFIG="+h.kubeconfig)
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

func (x *harness) kubectlRun(ctx context.Context, args ...string) (string, error) {
	return run(ctx, x.kubectl, append([]string{"--kubeconfig", x.kubeconfig}, args...)...)
}

// nodeSh runs test/e2e/node/node.sh CMD with the harness environment.
func (x *harness) nodeSh(ctx context.Context, args ...string) (string, error) {
	return run(ctx, x.root+"/test/e2e/node/node.sh", args...)
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// namespace creates (or replaces) a namespace with labels and annotations and
// waits for its default service account.
func (x *harness) namespace(ctx context.Context, t *testing.T, name string, labels, annos map[string]string) {
	t.Helper()
	_ = x.cs.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := x.cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("old namespace %s did not go away: %v", name, err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annos}}
	if _, err := x.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := x.cs.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("namespace %s has no default service account: %v", name, err)
	}
}

// reportPod is a pod running the test image as uid 1000 (restricted-ready).
func reportPod(name string, annos map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annos},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](1000),
				RunAsGroup:     ptr.To[int64](1000),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            "main",
				Image:           reportImage,
				ImagePullPolicy: corev1.PullNever,
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1m"), corev1.ResourceMemory: resource.MustParse("8Mi")},
				},
			}},
		},
	}
}

// waitRunning waits until the pod's containers run and returns the pod.
func (x *harness) waitRunning(ctx context.Context, ns, name string, timeout time.Duration) (*corev1.Pod, error) {
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := x.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		pod = p
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			return false, fmt.Errorf("pod %s/%s ended: %s", ns, name, p.Status.Phase)
		}
		return p.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		return pod, fmt.Errorf("pod %s/%s not running: %w (%s)", ns, name, err, podWhy(pod))
	}
	return pod, nil
}

func podWhy(p *corev1.Pod) string {
	if p == nil {
		return "no pod"
	}
	var b []string
	b = append(b, "phase "+string(p.Status.Phase))
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			b = append(b, fmt.Sprintf("%s: %s", c.Type, c.Message))
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			b = append(b, fmt.Sprintf("%s waiting %s: %s", cs.Name, w.Reason, w.Message))
		}
		if tm := cs.State.Terminated; tm != nil {
			b = append(b, fmt.Sprintf("%s terminated %s (exit %d): %s", cs.Name, tm.Reason, tm.ExitCode, tm.Message))
		}
	}
	return strings.Join(b, "; ")
}

// containerReport reads the test image's JSON line from the container's log.
func (x *harness) containerReport(ctx context.Context, ns, pod, container string) (ContainerReport, error) {
	var rep ContainerReport
	var last error
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		raw, err := x.cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
		if err != nil {
			last = err
			return false, nil
		}
		line, _, _ := bytes.Cut(bytes.TrimSpace(raw), []byte("\n"))
		if len(line) == 0 {
			last = fmt.Errorf("empty log")
			return false, nil
		}
		if err := json.Unmarshal(line, &rep); err != nil {
			return false, fmt.Errorf("decode report of %s/%s: %w: %q", ns, pod, err, line)
		}
		return true, nil
	})
	if err != nil {
		return rep, fmt.Errorf("report of %s/%s: %w (last: %v)", ns, pod, err, last)
	}
	return rep, nil
}

// waitAllocatable waits until the e2e node's allocatable res satisfies ok.
func (x *harness) waitAllocatable(ctx context.Context, res corev1.ResourceName, timeout time.Duration, ok func(int64) bool) (int64, error) {
	return x.waitNodeAllocatable(ctx, nodeName, res, timeout, ok)
}

// waitNodeAllocatable waits until a node's allocatable res satisfies ok.
func (x *harness) waitNodeAllocatable(ctx context.Context, node string, res corev1.ResourceName, timeout time.Duration, ok func(int64) bool) (int64, error) {
	return pollCount(ctx, timeout, func(ctx context.Context) (int64, error) { return x.nodeAllocatable(ctx, node, res) }, ok)
}

// pollCount reads a count every 500 ms until ok accepts it or timeout
// passes, and returns the last count read.
func pollCount(ctx context.Context, timeout time.Duration, read func(context.Context) (int64, error), ok func(int64) bool) (int64, error) {
	var v int64
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		var err error
		v, err = read(ctx)
		return err == nil && ok(v), nil
	})
	return v, err
}

// waitKubeletBack waits until a kubelet restarted at since has registered
// the device plugins again: the plugin's socket for res is in pluginDir (the
// kubelet wiped that directory on start), and a Node status the new kubelet
// wrote shows the node Ready with want for every resource
// (nodestatus.MissingSince: an older status may still show what the
// previous kubelet had, while the new one admits no pod asking for a
// plugin's resource until that plugin registers again).
func (x *harness) waitKubeletBack(ctx context.Context, node, pluginDir string, res corev1.ResourceName, since time.Time, want map[corev1.ResourceName]int64, timeout time.Duration) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if !servesSocket(pluginDir, string(res)) {
			last = "no plugin socket of " + string(res) + " in " + pluginDir
			return false, nil
		}
		n, err := x.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = nodestatus.MissingSince(n, since, want)
		return last == "", nil
	})
	if err != nil {
		return fmt.Errorf("kubelet on %s not back with its devices: %w (%s)", node, err, last)
	}
	return nil
}

// startReport creates p in ns, waits for it to run and returns the report
// of its container "main"; a failure ends the scenario.
func (x *harness) startReport(ctx context.Context, t *testing.T, r *Result, ns string, p *corev1.Pod) ContainerReport {
	t.Helper()
	if _, err := x.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		fail(t, r, "create %s/%s: %v", ns, p.Name, err)
	}
	if _, err := x.waitRunning(ctx, ns, p.Name, podStartTimeout); err != nil {
		fail(t, r, "%v", err)
	}
	rep, err := x.containerReport(ctx, ns, p.Name, "main")
	if err != nil {
		fail(t, r, "%v", err)
	}
	return rep
}

// binaryExists says whether make build produced cmd (so the image has it).
func (x *harness) binaryExists(cmd string) bool {
	st, err := os.Stat(x.bin + "/" + cmd)
	return err == nil && st.Mode().IsRegular()
}

// clusterSh runs test/e2e/node/cluster.sh CMD (the four-node harness) with
// the harness environment.
func (x *harness) clusterSh(ctx context.Context, args ...string) (string, error) {
	return run(ctx, x.root+"/test/e2e/node/cluster.sh", args...)
}

// nodeAllocatable returns a node's allocatable quantity of a resource (0 if
// absent).
func (x *harness) nodeAllocatable(ctx context.Context, node string, res corev1.ResourceName) (int64, error) {
	n, err := x.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	q, ok := n.Status.Allocatable[res]
	if !ok {
		return 0, nil
	}
	return q.Value(), nil
}

// expect is check that also says whether ok held, for counting.
func expect(t *testing.T, r *Result, ok bool, format string, args ...any) bool {
	t.Helper()
	check(t, r, ok, format, args...)
	return ok
}

// unschedulable waits until the pod is Unschedulable and returns the
// scheduler's message.
func unschedulable(ctx context.Context, ns, name string, within time.Duration) (string, error) {
	var msg string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		p, err := h.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if c := suitetest.Unschedulable(p); c != nil {
			msg = c.Message
			return true, nil
		}
		return false, nil
	})
	return msg, err
}

// waitAdmission creates probe in ns as a dry run until five admissions in a
// row give a pod that settled accepts, or timeout passes: a config change is
// served by every webhook replica only once no replica answers the old way.
// settled also says what it read, returned as last for the error.
func waitAdmission(ctx context.Context, ns string, probe *corev1.Pod, timeout time.Duration, settled func(*corev1.Pod) (bool, string)) (last string, err error) {
	inARow := 0
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := h.cs.CoreV1().Pods(ns).Create(ctx, probe.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			last, inARow = err.Error(), 0
			return false, nil
		}
		ok, read := settled(p)
		last = read
		if ok {
			inARow++
		} else {
			inARow = 0
		}
		return inARow >= 5, nil
	})
	return last, err
}
