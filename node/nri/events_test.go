package nri

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/tools/record"

	"github.com/ibkube/ibkube/node/memlock"
)

func TestRecorderSink(t *testing.T) {
	t.Parallel()
	rec := record.NewFakeRecorder(10)
	sink := RecorderSink{Recorder: rec}
	pod := PodRef{Namespace: "ml", Name: "trainer-0", UID: "u1"}
	sink.MemlockEvent(pod, "nccl", memlock.Decision{Outcome: memlock.OutcomeClamped, Reason: "memlock set to 8Mi, clamped from the requested unlimited to the runtime's hard limit 8Mi"})
	sink.MemlockEvent(pod, "nccl", memlock.Decision{Outcome: memlock.OutcomeInvalid, Reason: "memlock not raised: bad"})
	sink.MemlockEvent(pod, "nccl", memlock.Decision{Outcome: memlock.OutcomeAlreadySet, Reason: "memlock left at 1Gi:1Gi"})
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	want := []string{
		"Warning MemlockClamped container nccl: memlock set to 8Mi, clamped from the requested unlimited to the runtime's hard limit 8Mi",
		"Warning MemlockInvalid container nccl: memlock not raised: bad",
		"Normal MemlockNotRaised container nccl: memlock left at 1Gi:1Gi",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}
