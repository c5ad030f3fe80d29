package memlock

import (
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
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

// RankConfEvent implements EventSink: a container whose NCCL conf file for
// processes started without its environment could not be mounted.
func (s RecorderSink) RankConfEvent(pod PodRef, container string, c RankConf) {
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: types.UID(pod.UID)}
	typ := corev1.EventTypeWarning
	if c.Outcome == RankUserMount {
		typ = corev1.EventTypeNormal
	}
	s.Recorder.Eventf(ref, typ, ReasonRankConf, "container %s: %s", container, c.Reason)
}

// InClusterEventSink returns a RecorderSink writing Events through the
// in-cluster API client (the agent's service account needs create/patch on
// events), and a stop function; outside a cluster it returns nil and a no-op.
func InClusterEventSink(nodeName string, log logr.Logger) (EventSink, func()) {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		log.V(1).Info("no in-cluster API client: memlock decisions are logged, not sent as pod events", "reason", err.Error())
		return nil, func() {}
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		log.Error(err, "API client for pod events; memlock decisions are only logged")
		return nil, func() {}
	}
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")})
	rec := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "ibkube-node-agent", Host: nodeName})
	return RecorderSink{Recorder: rec}, b.Shutdown
}
