package nri

import (
	"github.com/ibkube/ibkube/node/memlock"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// Event reasons on the pod.
const (
	ReasonClamped   = "MemlockClamped"
	ReasonInvalid   = "MemlockInvalid"
	ReasonNotRaised = "MemlockNotRaised"
	// ReasonRankConf says a container's NCCL settings do not reach the
	// processes it starts with an empty environment (MPI ranks over SSH).
	ReasonRankConf = "NCCLConfNotMounted"
)

// Recorder records an Event about an object: the part of client-go's
// record.EventRecorder the sink uses. The binary builds the recorder from its
// API client, so this package links no client.
type Recorder interface {
	Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any)
}

// RecorderSink turns decisions into pod Events through a Recorder.
type RecorderSink struct{ Recorder Recorder }

// MemlockEvent implements EventSink.
func (s RecorderSink) MemlockEvent(pod PodRef, container string, d memlock.Decision) {
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: types.UID(pod.UID)}
	typ, reason := corev1.EventTypeWarning, ReasonNotRaised
	switch d.Outcome {
	case memlock.OutcomeClamped:
		reason = ReasonClamped
	case memlock.OutcomeInvalid:
		reason = ReasonInvalid
	case memlock.OutcomeAlreadySet:
		typ = corev1.EventTypeNormal
	}
	s.Recorder.Eventf(ref, typ, reason, "container %s: %s", container, d.Reason)
}

// RankConfEvent implements EventSink: a container whose NCCL conf file for
// processes started without its environment could not be mounted.
func (s RecorderSink) RankConfEvent(pod PodRef, container string, c memlock.RankConf) {
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: types.UID(pod.UID)}
	typ := corev1.EventTypeWarning
	if c.Outcome == memlock.RankUserMount && !c.Warn {
		typ = corev1.EventTypeNormal
	}
	s.Recorder.Eventf(ref, typ, ReasonRankConf, "container %s: %s", container, c.Reason)
}

// GIDEvent implements GIDEventSink: a container holding RoCE ports that
// give no one GID index.
func (s RecorderSink) GIDEvent(pod PodRef, container, reason string) {
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: types.UID(pod.UID)}
	s.Recorder.Eventf(ref, corev1.EventTypeWarning, ReasonGIDIndex, "container %s: %s", container, reason)
}
