package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/node/dra"
)

// TestRunDRAWithoutAPIServer: DRA mode cannot work without the API server
// (slices, the gate check); the agent says so and how to give it one,
// instead of falling back to device plugins.
func TestRunDRAWithoutAPIServer(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	dir := fixture.BuildTemp(t, fixture.HB)
	base := []string{
		"--allocation=dra", "--node-name=nd-0", "--sysfs-root", fixture.SysfsRoot(dir), "--dev-root", fixture.DevRoot(dir), "--netlink=false",
		"--config", filepath.Join(dir, "missing.yaml"), "--state-dir", t.TempDir(), "--nri=false", "--counters=false",
		"--metrics-bind-address=0", "--health-probe-bind-address=0", "--log-level=error",
	}
	for _, tc := range []struct {
		extra []string
		want  string
	}{
		{nil, "--allocation=dra needs the API server"},
		{[]string{"--kubeconfig", filepath.Join(dir, "absent.kubeconfig")}, "--kubeconfig " + filepath.Join(dir, "absent.kubeconfig")},
	} {
		err := run(context.Background(), append(base, tc.extra...))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run %v = %v, want an error containing %q", tc.extra, err, tc.want)
		}
	}
}

// TestReconcileClientOwnLimit: the DRA driver's stale-spec reconcile reads
// through a client of its own without client-go's default 5 QPS bucket
// (the driver paces it), so a round of hundreds of claim reads does not
// queue the agent's Prepare reads, slice and taint writes behind it; the
// agent's client keeps its limit.
func TestReconcileClientOwnLimit(t *testing.T) {
	t.Parallel()
	base := &rest.Config{Host: "https://127.0.0.1:1"}
	agent, err := kubernetes.NewForConfig(base)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := reconcileClient(base)
	if err != nil {
		t.Fatal(err)
	}
	if rl := rc.ResourceV1().RESTClient().GetRateLimiter(); rl != nil {
		t.Errorf("the reconcile's client has a client-side limiter (%T, %v QPS); the driver paces it", rl, rl.QPS())
	}
	if rl := agent.ResourceV1().RESTClient().GetRateLimiter(); rl == nil || rl.QPS() != rest.DefaultQPS {
		t.Errorf("the agent's client lost its %v QPS limit: %v", rest.DefaultQPS, rl)
	}
	if base.QPS != 0 || base.RateLimiter != nil {
		t.Errorf("reconcileClient changed the agent's config: QPS %v, limiter %v", base.QPS, base.RateLimiter)
	}
	if _, err := reconcileClient(nil); err == nil {
		t.Error("reconcileClient(nil) = nil error, want one naming the missing configuration")
	}
}

// The DRA driver's pod Events go out on the pod, with the type it chose.
func TestPodEventSink(t *testing.T) {
	t.Parallel()
	want := []string{"Warning GPUAlignmentFellBack aligned claim ml/c fell back involvedObject{kind=Pod,apiVersion=v1}"}
	checkEvents(t, want, func(rec record.EventRecorder) {
		var sink dra.PodEvents = podEventSink{rec: rec}
		sink.PodEvent(dra.PodRef{Namespace: "ml", Name: "train-0", UID: "u-1"}, corev1.EventTypeWarning, dra.ReasonGPUAlignmentFellBack, "aligned claim ml/c fell back")
	})
}
