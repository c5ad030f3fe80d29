package mutate

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/webhook/config"
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
//
// MaxNetworksJSONBytes bounds the networks value in its JSON form: the
// policies read JSON with patterns whose CEL cost grows with the value's
// length times the patterns' (about 100 per byte), so a JSON value of
// 16 KiB would exceed the API server's per-expression limit.
const (
	MaxAnnotationBytes   = 4 << 10
	MaxNetworksBytes     = 16 << 10
	MaxNetworksJSONBytes = 4 << 10
)

// BoundedPodKeys are the pod annotations ibkube parses, in the order their
// size is checked: every key a user writes (contract.UserKeys) and the
// memlock value, which a user may preset; BoundedNamespaceKeys the
// namespace's.
var (
	BoundedPodKeys       = append(prefixed(contract.UserKeys()), contract.AnnotationMemlock)
	BoundedNamespaceKeys = []string{contract.AnnotationMode, contract.AnnotationProfile, contract.AnnotationSocketFallback}
)

func prefixed(suffixes []string) []string {
	out := make([]string, len(suffixes))
	for i, s := range suffixes {
		out[i] = contract.Prefix + s
	}
	return out
}

// MaxGPUCount is the largest GPU count, either side of zero, a refusal
// repeats as a number; beyond it the count reads "more than MaxGPUCount"
// or "less than -MaxGPUCount". The policies cap the count they compute
// there (a quantity's integer value can overflow CEL's int), so the two
// say the same of any count.
const MaxGPUCount = 1_000_000

// gpuCountText is g as a refusal repeats it.
func gpuCountText(g int64) string {
	switch {
	case g > MaxGPUCount:
		return fmt.Sprintf("more than %d", MaxGPUCount)
	case g < -MaxGPUCount:
		return fmt.Sprintf("less than -%d", MaxGPUCount)
	}
	return strconv.FormatInt(g, 10)
}

// MaxAnnotations bounds the annotations of a pod ibkube admits. Finding an
// unknown key under contract.Prefix means looking at every key, which the
// admission policies' CEL pays per key in time and cost (40,000 keys, within
// the API server's 256 KiB, once took it 21-27 s); above the bound a pod is
// recognised by direct lookups of its known keys only, so deciding costs the
// same for every pod.
const MaxAnnotations = 256

// Relevant reports whether ibkube looks at a pod at all: it carries a known
// ibkube annotation, or (for a pod within MaxAnnotations) its namespace has
// a default mode or it carries any annotation under contract.Prefix. Only
// such pods are refused for their size. A pod over MaxAnnotations is
// ibkube's by its own known keys only, as the policies can tell before
// they see its namespace (a match condition has none): without one it is
// left alone, unknown keys, namespace default and all.
func Relevant(annotations map[string]string, ns Namespace) bool {
	for _, k := range contract.KnownKeys() {
		if _, ok := annotations[contract.Prefix+k]; ok {
			return true
		}
	}
	if AnnotationCount(annotations) > MaxAnnotations {
		return false
	}
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

// WrittenKeys are the annotations ibkube writes on a pod it admits.
func WrittenKeys() []string {
	return append(prefixed(contract.OwnKeys()), multus.Annotation)
}

// AnnotationCount is the count MaxAnnotations bounds: the pod's
// annotations less those ibkube writes, so that a pod counts the same
// before its admission, after it, and when admitted again.
func AnnotationCount(annotations map[string]string) int {
	n := len(annotations)
	for _, k := range WrittenKeys() {
		if _, ok := annotations[k]; ok {
			n--
		}
	}
	return n
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
// MaxContainers, more annotations than MaxAnnotations, or an ibkube
// annotation over MaxAnnotationBytes, before anything is parsed.
func checkSize(pod *corev1.Pod, ns Namespace) error {
	if err := ContainerCountRefusal(len(pod.Spec.Containers) + len(pod.Spec.InitContainers) + len(pod.Spec.EphemeralContainers)); err != nil {
		return err
	}
	if n := AnnotationCount(pod.Annotations); n > MaxAnnotations {
		return refusef("pod has %d annotations; accepted: at most %d on a pod ibkube admits: keep bulk data out of annotations (a ConfigMap or a volume)", n, MaxAnnotations)
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

// checkNetworksSize refuses a networks annotation over MaxNetworksBytes
// (MaxNetworksJSONBytes in the JSON form) on a pod that gets the IPoIB
// network, before it is parsed. The size leaves out the IPoIB network
// ibkube appends, so a value measures the same when admitted again.
func checkNetworksSize(pod *corev1.Pod, m contract.Mode, cfg *config.Config) error {
	v, ok := pod.Annotations[multus.Annotation]
	if !m.IPoIB || !ok {
		return nil
	}
	n := NetworksBytes(v, cfg)
	if n > MaxNetworksBytes {
		return refusef("annotation %s: value of %d bytes; accepted: at most %d bytes", multus.Annotation, n, MaxNetworksBytes)
	}
	if n > MaxNetworksJSONBytes && multus.DetectForm(v) == multus.FormJSON {
		return refusef("annotation %s: a JSON value of %d bytes; accepted: at most %d bytes in the JSON form (%d as a comma-separated list)",
			multus.Annotation, n, MaxNetworksJSONBytes, MaxNetworksBytes)
	}
	return nil
}

// NetworksBytes is the size of networks value v less the IPoIB network
// ibkube appends to it (in v's form), where v holds it.
func NetworksBytes(v string, cfg *config.Config) int {
	net := multus.Network{Namespace: cfg.IPoIBNamespace(), Name: cfg.IPoIB.Name, Interface: cfg.IPoIB.Interface}
	appended := ", " + net.String()
	if multus.DetectForm(v) == multus.FormJSON {
		merged, _, err := multus.Merge("[]", []multus.Network{net}, "")
		if err != nil {
			return len(v)
		}
		appended = "," + strings.TrimSuffix(strings.TrimPrefix(merged, "["), "]")
	}
	if strings.Contains(v, appended) {
		return len(v) - len(appended)
	}
	return len(v)
}

// boundNetworks is checkNetworksSize as a decision step: after the
// containers are selected, before the networks value is parsed.
func (d *decision) boundNetworks() error { return checkNetworksSize(d.pod, d.mode, d.cfg) }
