package mutate

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/webhook/multus"
)

// MaxContainers bounds the containers (regular, init and ephemeral
// together) of a pod ibkube admits. Admission work and memory grow with
// them (patch operations per selected container, and in policy mode CEL
// whose charged cost grows faster than the count: about 200,000 of the API
// server's 1,000,000 per-expression limit at 128 containers, the limit
// itself near 400). Real pods hold a handful; docs/webhook-operations.md
// has the measurements behind the figure.
const MaxContainers = 128

// MaxAnnotationBytes bounds each annotation value ibkube parses (the pod's
// and the namespace's), and MaxNetworksBytes the Multus networks
// annotation of a pod that gets the IPoIB network. The values are a few
// dozen bytes in practice; the bounds keep parsing, and splitting in the
// policies' CEL (whose time grows with the square of the parts while the
// charged cost grows linearly), short. The API server's own 256 KiB limit
// on annotations is checked by validation, after admission.
const (
	MaxAnnotationBytes = 4 << 10
	MaxNetworksBytes   = 16 << 10
)

// BoundedPodKeys are the pod annotations ibkube parses, in the order their
// size is checked; BoundedNamespaceKeys the namespace's.
var (
	BoundedPodKeys = []string{contract.AnnotationMode, contract.AnnotationHCAs, contract.AnnotationContainers, contract.AnnotationProfile,
		contract.AnnotationSocketFallback, contract.AnnotationIdleWarning, contract.AnnotationPlacement, contract.AnnotationMemlock}
	BoundedNamespaceKeys = []string{contract.AnnotationMode, contract.AnnotationProfile, contract.AnnotationSocketFallback}
)

// Relevant reports whether ibkube looks at a pod at all: it carries an
// ibkube annotation, or its namespace has a default mode. Only such pods
// are refused for their size.
func Relevant(annotations map[string]string, ns Namespace) bool {
	if _, ok := ns.Annotations[contract.AnnotationMode]; ok {
		return true
	}
	for k := range annotations {
		if strings.HasPrefix(k, contract.Prefix) {
			return true
		}
	}
	return false
}

// ContainerCountRefusal is the refusal of a pod holding n containers of
// every kind, or nil when n is within MaxContainers.
func ContainerCountRefusal(n int) error {
	if n <= MaxContainers {
		return nil
	}
	return refusef("pod has %d containers (containers, init containers and ephemeral containers together); "+
		"accepted: at most %d in a pod ibkube admits: split the work over several pods", n, MaxContainers)
}

// checkSize refuses a relevant pod that holds more containers than
// MaxContainers, or an ibkube annotation over MaxAnnotationBytes, before
// anything is parsed.
func checkSize(pod *corev1.Pod, ns Namespace) error {
	if !Relevant(pod.Annotations, ns) {
		return nil
	}
	if err := ContainerCountRefusal(len(pod.Spec.Containers) + len(pod.Spec.InitContainers) + len(pod.Spec.EphemeralContainers)); err != nil {
		return err
	}
	for _, k := range BoundedPodKeys {
		if v, ok := pod.Annotations[k]; ok && len(v) > MaxAnnotationBytes {
			return refusef("annotation %s: value of %d bytes; accepted: at most %d bytes", k, len(v), MaxAnnotationBytes)
		}
	}
	for _, k := range BoundedNamespaceKeys {
		if v, ok := ns.Annotations[k]; ok && len(v) > MaxAnnotationBytes {
			return refusef("namespace %s annotation %s: value of %d bytes; accepted: at most %d bytes", ns.Name, k, len(v), MaxAnnotationBytes)
		}
	}
	return nil
}

// checkNetworksSize refuses a networks annotation over MaxNetworksBytes on
// a pod that gets the IPoIB network, before it is parsed.
func checkNetworksSize(pod *corev1.Pod, m contract.Mode) error {
	if v := pod.Annotations[multus.Annotation]; m.IPoIB && len(v) > MaxNetworksBytes {
		return refusef("annotation %s: value of %d bytes; accepted: at most %d bytes", multus.Annotation, len(v), MaxNetworksBytes)
	}
	return nil
}

// boundNetworks is checkNetworksSize as a decision step: after the
// containers are selected, before the networks value is parsed.
func (d *decision) boundNetworks() error { return checkNetworksSize(d.pod, d.mode) }
