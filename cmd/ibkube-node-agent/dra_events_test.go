package main

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/ibkube/ibkube/node/dra"
)

// The DRA driver's pod Events go out on the pod, with the type it chose.
func TestPodEventSink(t *testing.T) {
	t.Parallel()
	rec := record.NewFakeRecorder(1)
	rec.IncludeObject = true
	var sink dra.PodEvents = podEventSink{rec: rec}
	sink.PodEvent(dra.PodRef{Namespace: "ml", Name: "train-0", UID: "u-1"}, corev1.EventTypeWarning, dra.ReasonGPUAlignmentFellBack, "aligned claim ml/c fell back")
	want := "Warning GPUAlignmentFellBack aligned claim ml/c fell back involvedObject{kind=Pod,apiVersion=v1}"
	if got := <-rec.Events; got != want {
		t.Errorf("event %q, want %q", got, want)
	}
}
