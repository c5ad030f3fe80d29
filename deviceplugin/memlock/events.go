package memlock

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
)

// Event reasons on the pod.
const (
	ReasonClamped   = "MemlockClamped"
	ReasonInvalid   = "MemlockInvalid"
	ReasonNotRaised = "MemlockNotRaised"
)

// RecorderSink turns decisions into pod Events through a client-go event
// recorder (the agent builds it from its client; tests use a fake one).
type RecorderSink struct{ Recorder record.EventRecorder }

// MemlockEvent implements EventSink.
func (s RecorderSink) MemlockEvent(pod PodRef, container string, d Decision) {
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: types.UID(pod.UID)}
	typ, reason := corev1.EventTypeWarning, ReasonNotRaised
	switch d.Outcome {
	case OutcomeClamped:
		reason = ReasonClamped
	case OutcomeInvalid:
		reason = ReasonInvalid
	case OutcomeAlreadySet:
		typ = corev1.EventTypeNormal
	}
	s.Recorder.Eventf(ref, typ, reason, "container %s: %s", container, d.Reason)
}
