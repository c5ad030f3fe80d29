//go:build integration

package chart

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ibkube/ibkube/internal/testing/testenv"
)

// TestAPIServerAgentCannotListPods installs manifests/ibkube.yaml (the
// default values: the split-job check off) and acts as both node agents:
// each may get a pod by name, which is how it reads the pods its kubelet
// names, and may list or watch no pods, in any namespace.
func TestAPIServerAgentCannotListPods(t *testing.T) {
	cfg := startAPIServer(t)
	c := newCluster(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c.installManifests(ctx, t)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "rank-0", Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
	if _, err := c.cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, sa := range []string{"ibkube-node-agent", "ibkube-node-agent-dra"} {
		agent := testenv.Clientset(t, impersonate(cfg, namespace, sa))
		if _, err := agent.CoreV1().Pods("default").Get(ctx, "rank-0", metav1.GetOptions{}); err != nil {
			t.Errorf("%s gets a pod by name: %v", sa, err)
		}
		if _, err := agent.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("%s lists every pod: %v, want forbidden", sa, err)
		}
		if _, err := agent.CoreV1().Pods("default").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=nd-0"}); !apierrors.IsForbidden(err) {
			t.Errorf("%s lists pods even with a node's field selector: %v, want forbidden (RBAC cannot narrow by field)", sa, err)
		}
		if _, err := agent.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("%s watches pods: %v, want forbidden", sa, err)
		}
	}
}
