//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/ibkube/ibkube/webhook/mutate"
)

// widePod is an rdma-shared report pod of n containers.
func widePod(name string, n int) *corev1.Pod {
	p := reportPod(name, map[string]string{prefix + "mode": "rdma-shared"})
	base := p.Spec.Containers[0]
	for i := 1; i < n; i++ {
		c := *base.DeepCopy()
		c.Name = fmt.Sprintf("side-%d", i)
		p.Spec.Containers = append(p.Spec.Containers, c)
	}
	return p
}

// webhookReplicas is how many webhook pods are Ready and their restarts.
func webhookReplicas(ctx context.Context, t *testing.T, r *Result) (ready int, restarts int32) {
	t.Helper()
	pods, err := h.cs.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=webhook"})
	if err != nil {
		fail(t, r, "list webhook pods: %v", err)
	}
	for _, p := range pods.Items {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				ready++
			}
		}
		for _, s := range p.Status.ContainerStatuses {
			restarts += s.RestartCount
		}
	}
	return ready, restarts
}

// 4b: a pod one container over ibkube's limit, created through the API
// server, is refused with ibkube's message naming the count and the limit;
// the largest pod within it is admitted; both webhook replicas stay up.
func testWorkBound(ctx context.Context, t *testing.T, r *Result) {
	const ns = "e2e-work-bound"
	optedIn(ctx, t, ns, false)
	// Both replicas Ready before: an earlier scenario's helm step may still
	// be bringing one up on a busy machine.
	var readyBefore int
	var restartsBefore int32
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		readyBefore, restartsBefore = webhookReplicas(ctx, t, r)
		return readyBefore == 2, nil
	})
	check(t, r, err == nil, "%d webhook replicas Ready before, want 2", readyBefore)

	start := time.Now()
	_, err = h.cs.CoreV1().Pods(ns).Create(ctx, widePod("over", mutate.MaxContainers+1), metav1.CreateOptions{})
	r.Figures["refusal_seconds"] = time.Since(start).Seconds()
	want := fmt.Sprintf("pod has %d containers", mutate.MaxContainers+1)
	if err == nil {
		fail(t, r, "a pod of %d containers was admitted", mutate.MaxContainers+1)
	}
	r.Notes = append(r.Notes, "refusal: "+err.Error())
	check(t, r, strings.Contains(err.Error(), "admission webhook") && strings.Contains(err.Error(), want) && strings.Contains(err.Error(), fmt.Sprintf("at most %d", mutate.MaxContainers)),
		"refusal is not ibkube's naming the count and the limit: %v", err)

	start = time.Now()
	p, err := h.cs.CoreV1().Pods(ns).Create(ctx, widePod("largest", mutate.MaxContainers), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	r.Figures["largest_admitted_seconds"] = time.Since(start).Seconds()
	if err != nil {
		fail(t, r, "the largest pod within the limit (%d containers) was refused: %v", mutate.MaxContainers, err)
	}
	check(t, r, p.Annotations[prefix+"injected"] != "", "the %d-container pod was not mutated", mutate.MaxContainers)

	readyAfter, restartsAfter := webhookReplicas(ctx, t, r)
	check(t, r, readyAfter == 2 && restartsAfter == restartsBefore, "webhook replicas after: %d Ready, %d restarts (before %d)", readyAfter, restartsAfter, restartsBefore)
}

// policyWorkBound is 4b in policy mode: the same refusal, from the
// ValidatingAdmissionPolicy, in bounded time.
func policyWorkBound(ctx context.Context, t *testing.T, r *Result, ns string) {
	start := time.Now()
	_, err := h.cs.CoreV1().Pods(ns).Create(ctx, widePod("over", mutate.MaxContainers+1), metav1.CreateOptions{})
	r.Figures["policy_refusal_seconds"] = time.Since(start).Seconds()
	check(t, r, err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy") && strings.Contains(err.Error(), fmt.Sprintf("pod has %d containers", mutate.MaxContainers+1)),
		"policy mode: a pod of %d containers: %v, want the policy's refusal naming the count", mutate.MaxContainers+1, err)
	start = time.Now()
	p, err := h.cs.CoreV1().Pods(ns).Create(ctx, widePod("largest", mutate.MaxContainers), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	r.Figures["policy_largest_admitted_seconds"] = time.Since(start).Seconds()
	check(t, r, err == nil && p.Annotations[prefix+"injected"] != "", "policy mode: the %d-container pod: %v, want it mutated", mutate.MaxContainers, err)
}
