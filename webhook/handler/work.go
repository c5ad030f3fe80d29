package handler

import (
	"fmt"

	kjson "sigs.k8s.io/json"

	"github.com/ibkube/ibkube/webhook/mutate"
)

// podShape is what the handler reads of a pod before decoding it: how many
// containers of each kind it holds. A container decodes into an empty
// struct, which costs no memory, so a review of 100,000 minimal containers
// is counted in a few milliseconds and a few bytes instead of being built
// as 100,000 corev1.Containers. Annotations are read only for a pod over
// the bound (podAnnotations), so a pod within it costs no copy of them.
type podShape struct {
	Spec struct {
		Containers          []struct{} `json:"containers"`
		InitContainers      []struct{} `json:"initContainers"`
		EphemeralContainers []struct{} `json:"ephemeralContainers"`
	} `json:"spec"`
}

type podAnnotations struct {
	Metadata struct {
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
}

// workCheck is what the pre-scan decided: the pod is within bounds (both
// empty), is refused (refusal), or is over the bounds but of no concern to
// ibkube (skip).
type workCheck struct {
	refusal     string
	skip        bool
	annotations map[string]string
}

// checkWork bounds the work a pod can cost before it is decoded: a pod
// ibkube looks at (mutate.Relevant) with more than mutate.MaxContainers
// containers of every kind is refused with the core's own message, one it
// does not look at is let through untouched.
func checkWork(object []byte, ns mutate.Namespace) (workCheck, error) {
	var shape podShape
	if err := kjson.UnmarshalCaseSensitivePreserveInts(object, &shape); err != nil {
		return workCheck{}, fmt.Errorf("decode pod: %w", err)
	}
	s := shape.Spec
	refusal := mutate.ContainerCountRefusal(len(s.Containers) + len(s.InitContainers) + len(s.EphemeralContainers))
	if refusal == nil {
		return workCheck{}, nil
	}
	var meta podAnnotations
	if err := kjson.UnmarshalCaseSensitivePreserveInts(object, &meta); err != nil {
		return workCheck{}, fmt.Errorf("decode pod: %w", err)
	}
	if !mutate.Relevant(meta.Metadata.Annotations, ns) {
		return workCheck{skip: true}, nil
	}
	return workCheck{refusal: refusal.Error(), annotations: meta.Metadata.Annotations}, nil
}
