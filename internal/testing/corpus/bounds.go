package corpus

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/webhook/mutate"
)

// boundsCases are the cases of the bounds both sides keep: the container
// count and annotation sizes, memlock values whole only in exact
// arithmetic, the shapes of JSON network values, and characters a refusal
// must escape. pod is the refusal table's pod (8 GPUs in "train").
func boundsCases(add func(string, *corev1.Pod, mutate.Namespace), pod *corev1.Pod) {
	with := func(p *corev1.Pod, kv ...string) *corev1.Pod {
		p = p.DeepCopy()
		p.Annotations = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			p.Annotations[kv[i]] = kv[i+1]
		}
		return p
	}
	m, ml, c, nets := contract.AnnotationMode, contract.AnnotationMemlock, contract.AnnotationContainers, "k8s.v1.cni.cncf.io/networks"

	wide := func(n int) *corev1.Pod {
		p := pod.DeepCopy()
		for i := len(p.Spec.Containers) + len(p.Spec.InitContainers); i < n; i++ {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: fmt.Sprintf("side-%d", i), Image: "x"})
		}
		return p
	}
	add("bounds/containers-at-limit", with(wide(mutate.MaxContainers), m, "rdma-shared"), optedIn("t"))
	add("bounds/containers-over-limit", with(wide(mutate.MaxContainers+1), m, "rdma-exclusive,ipoib"), optedIn("t"))
	add("bounds/containers-over-limit-namespace-mode", with(wide(mutate.MaxContainers+1)), optedIn("t", m, "rdma-shared"))
	add("bounds/containers-over-limit-not-ours", with(wide(mutate.MaxContainers+1)), optedIn("t"))
	// The annotation count: ibkube's pod over it is refused; one that is not
	// is passed by, an unknown key under the prefix with it, as the policies
	// decide it with lookups only.
	fill := func(p *corev1.Pod, n int) *corev1.Pod {
		for i := 0; len(p.Annotations) < n; i++ {
			p.Annotations[FillerKey(i)] = ""
		}
		return p
	}
	add("bounds/annotations-at-limit", fill(with(pod, m, "rdma-shared"), mutate.MaxAnnotations), optedIn("t"))
	add("bounds/annotations-over-limit", fill(with(pod, m, "rdma-shared"), mutate.MaxAnnotations+1), optedIn("t"))
	add("bounds/annotations-over-limit-own-key", fill(with(pod, contract.AnnotationInjected, "x"), 2000), optedIn("t"))
	add("bounds/annotations-over-limit-namespace-mode", fill(with(pod), 2000), optedIn("t", m, "rdma-shared"))
	add("bounds/annotations-over-limit-not-ours", fill(with(pod), 2000), optedIn("t"))
	add("bounds/unknown-key-at-limit", fill(with(pod, contract.Prefix+"hca", "8"), mutate.MaxAnnotations), optedIn("t"))
	add("bounds/unknown-key-over-limit", fill(with(pod, contract.Prefix+"hca", "8"), mutate.MaxAnnotations+1), optedIn("t"))
	add("bounds/annotation-over-limit", with(pod, m, "rdma-shared", c, strings.Repeat("train,", mutate.MaxAnnotationBytes/6+1)), optedIn("t"))
	// The size that once took the API server 97 s to split and iterate.
	add("bounds/annotation-468KB", with(pod, m, "rdma-shared", c, strings.Repeat("train,", 78_000)), optedIn("t"))
	add("bounds/networks-468KB", with(pod, m, "ipoib", nets, strings.Repeat("a,", 234_000)+"b"), optedIn("t"))
	add("bounds/namespace-annotation-over-limit", with(pod, m, "rdma-shared"), optedIn("t", contract.AnnotationProfile, strings.Repeat("p", mutate.MaxAnnotationBytes+1)))
	add("bounds/networks-over-limit", with(pod, m, "ipoib", nets, strings.Repeat("a,", mutate.MaxNetworksBytes/2)+"b"), optedIn("t"))
	add("bounds/networks-json-at-limit", with(pod, m, "ipoib", nets, JSONNetworksOfSize(mutate.MaxNetworksJSONBytes)), optedIn("t"))
	add("bounds/networks-json-over-limit", with(pod, m, "ipoib", nets, JSONNetworksOfSize(mutate.MaxNetworksJSONBytes+1)), optedIn("t"))
	add("bounds/networks-over-limit-not-ipoib", with(pod, m, "rdma-shared", nets, strings.Repeat("a,", mutate.MaxNetworksBytes/2)+"b"), optedIn("t"))

	// Whole numbers of bytes that a quantity holds as a decimal, and the
	// edges of the range.
	for _, v := range []string{"1.5Gi", "0.5Gi", "2.5Mi", "1000m", "1Ei", "7Ei", "1024Pi", "9223372036854775806", "0.5Ki", "1e3"} {
		add("memlock/accepted-"+v, with(pod, m, "rdma-shared", ml, v), optedIn("t"))
	}
	for _, v := range []string{"9223372036854775807", "8Ei", "1.5", "1500m", "0.3Ki", "1e-3", "4611686018427387904.5"} {
		add("memlock/refused-"+v, with(pod, m, "rdma-shared", ml, v), optedIn("t"))
	}
	// GPU counts in the forms a quantity takes: plain digits, which the
	// policy reads as an integer, and the rest, which it parses as a
	// quantity; around the million it caps them at, and from a request
	// where the limit is missing.
	gpus := func(v string, limit bool) *corev1.Pod {
		p := with(pod, m, "rdma-exclusive")
		r := &p.Spec.Containers[0].Resources
		r.Limits, r.Requests = corev1.ResourceList{}, corev1.ResourceList{}
		if limit {
			r.Limits["nvidia.com/gpu"] = resource.MustParse(v)
		} else {
			r.Requests["nvidia.com/gpu"] = resource.MustParse(v)
		}
		return p
	}
	for _, v := range append([]string{"0", "4", "999999", "1000000", "1000001", "1k", "1M", "2500m", "500m", "1e3", "8Ei", "0.001"}, gpuCountsValidationFirst()...) {
		add("gpus/limit-"+v, gpus(v, true), optedIn("t"))
	}
	add("gpus/request-only-2", gpus("2", false), optedIn("t"))
	add("gpus/request-only-1500m", gpus("1500m", false), optedIn("t"))
	// Characters strconv.Quote escapes and CEL's strings.quote does not.
	add("escape/control-characters", with(pod, m, "rdma\x01\x1b[31m\x7f\u0085\u200b\u2028"), optedIn("t"))
	add("escape/container-name", with(pod, m, "rdma-shared", c, "train,\x00x"), optedIn("t"))

	add("difference/networks-json-object", with(pod, m, "ipoib", nets, `{}`), optedIn("t"))
	add("difference/networks-json-string-element", with(pod, m, "ipoib", nets, `["a"]`), optedIn("t"))
	// JSON networks the webhook's decoder refuses though well-formed (both
	// refuse, each in its own words: KnownDifferences), and the IPoIB
	// network found by its element, not by its text.
	for name, v := range JSONRefusals {
		add("difference/json-"+name, with(pod, m, "ipoib", nets, v), optedIn("t"))
	}
	for name, v := range map[string]string{
		"known-names-nested":     `[{"name":"a","cni-args":{"name":1,"ips":"x"},"x":[{"interface":{}}]}]`,
		"ipoib-first-of-two":     `[{"name":"ibkube-ipoib","namespace":"ibkube-system","interface":"ib7"},{"name":"a"}]`,
		"ipoib-name-nested-only": `[{"name":"a","cni-args":{"name":"ibkube-ipoib","namespace":"ibkube-system"}}]`,
	} {
		add("json/"+name, with(pod, m, "ipoib", nets, v), optedIn("t"))
	}
	add("json/networks-duplicate-name-key", with(pod, m, "ipoib", nets, `[{"name":"a","name":"b"}]`), optedIn("t"))
	add("difference/escape-private-use", with(pod, m, "rdma\ue000"), optedIn("t"))
	add("difference/memlock-fraction-over-8Ei", with(pod, m, "rdma-shared", ml, "9223372036854775807.5"), optedIn("t"))
}

// gpuCountsValidationFirst are GPU counts of the corpus that the webhook
// refuses with its message, and that in policy mode the API server's
// validation refuses first (a negative count, or a fraction the policy
// leaves in the exclusive resource it writes).
func gpuCountsValidationFirst() []string {
	return []string{"-4", "-8Ei", "-1000001", "-1500m", "-500m", "999999500m", "1000000500m"}
}

// FillerKey is the i-th of the short annotation keys that fill a pod
// towards a count: 40,000 of them with empty values fit the API server's
// 256 KiB for annotations.
func FillerKey(i int) string { return "f" + strconv.FormatInt(int64(i), 36) }

// JSONRefusals are well-formed JSON networks values the webhook's decoder
// refuses, by case name; the policies refuse them with their own message.
var JSONRefusals = map[string]string{
	"name-not-a-string":       `[{"name":1}]`,
	"name-upper-case-key":     `[{"NAME":true}]`,
	"no-name":                 `[{"namespace":"a"}]`,
	"ips-not-a-list":          `[{"name":"a","ips":"10.1.2.3/24"}]`,
	"second-element-a-string": `[{"name":"a"},"b"]`,
	"interface-too-long":      `[{"name":"a","interface":"abcdefghijklmnop"}]`,
}
