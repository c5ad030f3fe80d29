// Package cordon waits until kube-scheduler has seen nodes cordoned.
//
// A cordon is a Node update that the scheduler learns through its informer;
// until its cache has it, the scheduler may still bind a pod to a cordoned
// node. The e2e scenarios that steer a job's placement by cordoning nodes
// wait here first: a probe pod that may only go to the cordoned nodes is
// sent until the scheduler finds one unschedulable because the nodes "were
// unschedulable". A probe bound before that only means the scheduler's
// cache was not there yet, so it is deleted and the next one sent.
package cordon

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/ibkube/ibkube/internal/testing/suitetest"
)

// UnschedulableReason is the NodeUnschedulable filter's reason for a
// cordoned node, as the scheduler writes it into the pod's PodScheduled
// condition ("0/4 nodes are available: 2 node(s) were unschedulable, ...").
// Source: kubernetes pkg/scheduler/framework/plugins/nodeunschedulable,
// ErrReasonUnschedulable = "node(s) were unschedulable".
const UnschedulableReason = "were unschedulable"

// Pods is what the wait needs of the API: pods of one namespace.
type Pods interface {
	Create(ctx context.Context, pod *corev1.Pod, opts metav1.CreateOptions) (*corev1.Pod, error)
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Pod, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// Seen is how the scheduler came to show the cordon.
type Seen struct {
	// Message is the probe's PodScheduled condition that showed it.
	Message string
	// PlacedEarly counts the probes the scheduler bound before its cache
	// had the cordon (each deleted and sent again).
	PlacedEarly int
	// LastNode is where the last early probe was bound.
	LastNode string
}

// Wait sends probes made from probe (a pod whose node affinity allows only
// the cordoned nodes; its name is the stem of each probe's) until the
// scheduler finds one unschedulable for the cordon, polling each probe every
// interval, and gives up after within. Every probe it created is deleted
// when it returns.
func Wait(ctx context.Context, pods Pods, probe *corev1.Pod, interval, within time.Duration) (Seen, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var s Seen
	for attempt := 1; ; attempt++ {
		p := probe.DeepCopy()
		p.Name = fmt.Sprintf("%s-%d", probe.Name, attempt)
		node, msg, err := look(ctx, pods, p, interval)
		s.Message = msg
		switch {
		case err != nil:
			return s, fmt.Errorf("the scheduler has not shown the cordon within %s (%d probe(s) bound before it did, the last on %q; last condition %q): %w",
				within, s.PlacedEarly, s.LastNode, msg, err)
		case node == "":
			return s, nil
		}
		s.PlacedEarly++
		s.LastNode = node
	}
}

// look creates p and watches it until the scheduler either binds it (node
// set) or finds it unschedulable for the cordon (msg), then deletes it.
func look(ctx context.Context, pods Pods, p *corev1.Pod, interval time.Duration) (node, msg string, err error) {
	if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return "", "", fmt.Errorf("create probe %s: %w", p.Name, err)
	}
	defer func() {
		// Also when ctx has ended: a probe left behind would hold a node.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if derr := pods.Delete(dctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); derr != nil && err == nil {
			err = fmt.Errorf("delete probe %s: %w", p.Name, derr)
		}
	}()
	err = wait.PollUntilContextCancel(ctx, interval, true, func(ctx context.Context) (bool, error) {
		got, gerr := pods.Get(ctx, p.Name, metav1.GetOptions{})
		if gerr != nil {
			return false, nil // the API server is slow or restarting: look again
		}
		node, msg = got.Spec.NodeName, unschedulable(got)
		return node != "" || strings.Contains(msg, UnschedulableReason), nil
	})
	return node, msg, err
}

// unschedulable is the pod's PodScheduled=False Unschedulable message, or "".
func unschedulable(p *corev1.Pod) string {
	if c := suitetest.Unschedulable(p); c != nil {
		return c.Message
	}
	return ""
}
