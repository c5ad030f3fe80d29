package handler

import (
	"fmt"

	kjson "sigs.k8s.io/json"

	"github.com/ibkube/ibkube/webhook/mutate"
)

// podShape is what the handler reads of a pod before decoding it: how many
// containers of each kind it holds, counted on the raw JSON (elementCount),
// so a review of 1.4 million minimal containers costs one pass over its
// bytes instead of 1.4 million decoded corev1.Containers, or even 1.4
// million reflected empty structs (seconds of CPU). Annotations are read
// only for a pod over the bound (podAnnotations), so a pod within it costs
// no copy of them.
type podShape struct {
	Spec struct {
		Containers          elementCount `json:"containers"`
		InitContainers      elementCount `json:"initContainers"`
		EphemeralContainers elementCount `json:"ephemeralContainers"`
	} `json:"spec"`
}

// elementCount is the number of elements of a JSON array. The decoder has
// checked the whole document before it hands over the array's bytes, so
// counting the commas outside nested values and strings is exact.
type elementCount int

func (c *elementCount) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || b[0] != '[' {
		if string(b) == "null" {
			*c = 0
			return nil
		}
		return fmt.Errorf("want a list, got %.20q", b)
	}
	n, depth, inString, escaped, empty := 0, 0, false, false, true
	for _, ch := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case ch == '\\':
				escaped = true
			case ch == '"':
				inString = false
			}
		case ch == '"':
			inString = true
			empty = false
		case ch == '[' || ch == '{':
			if depth > 0 {
				empty = false
			}
			depth++
		case ch == ']' || ch == '}':
			depth--
		case ch == ',' && depth == 1:
			n++
		case ch != ' ' && ch != '\t' && ch != '\n' && ch != '\r':
			empty = false
		}
	}
	if !empty {
		n++
	}
	*c = elementCount(n)
	return nil
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
	refusal := mutate.ContainerCountRefusal(int(s.Containers + s.InitContainers + s.EphemeralContainers))
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
