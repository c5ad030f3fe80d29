package mutate

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/ibkube/ibkube/contract"
)

// TestSizeRefusals: a pod ibkube looks at is refused, with the count or
// the size and the bound, when it holds more containers than
// MaxContainers (every kind counted) or an annotation ibkube parses is over
// its bound; a pod at the bounds is admitted, and one ibkube does not look
// at is left alone whatever its size.
func TestSizeRefusals(t *testing.T) {
	t.Parallel()
	containers := func(n int) []corev1.Container {
		cs := make([]corev1.Container, n)
		for i := range cs {
			cs[i] = corev1.Container{Name: fmt.Sprintf("c%d", i), Image: "x"}
		}
		return cs
	}
	pod := func(annos map[string]string, regular, init, ephemeral int) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{Containers: containers(regular)}}
		p.Annotations = annos
		p.Spec.InitContainers = containers(init)
		for _, c := range containers(ephemeral) {
			p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon(c)})
		}
		for i := range p.Spec.InitContainers {
			p.Spec.InitContainers[i].Name = "i" + p.Spec.InitContainers[i].Name
		}
		for i := range p.Spec.EphemeralContainers {
			p.Spec.EphemeralContainers[i].Name = "e" + p.Spec.EphemeralContainers[i].Name
		}
		return p
	}
	shared := map[string]string{contract.AnnotationMode: "rdma-shared"}
	// many is kv plus filler annotations up to n in all.
	many := func(n int, kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		for i := 0; len(m) < n; i++ {
			m[fmt.Sprintf("example.com/k%d", i)] = "v"
		}
		return m
	}
	typo := contract.Prefix + "hca"
	tests := []struct {
		name string
		pod  *corev1.Pod
		ns   Namespace
		want string // "" admitted or left alone
	}{
		{"at-the-limit", pod(shared, MaxContainers, 0, 0), optedIn("t"), ""},
		{"one-over", pod(shared, MaxContainers+1, 0, 0), optedIn("t"), "pod has 129 containers (containers, init containers and ephemeral containers together); accepted: at most 128 in a pod ibkube admits: split the work over several pods"},
		{"init-and-ephemeral-count", pod(shared, 100, 20, 9), optedIn("t"), "pod has 129 containers"},
		{"namespace-default-mode", pod(nil, MaxContainers+1, 0, 0), optedIn("t", contract.AnnotationMode, "rdma-shared"), "pod has 129 containers"},
		{"not-ours", pod(nil, 1000, 0, 0), optedIn("t"), ""},
		{"annotations-at-the-limit", pod(many(MaxAnnotations, contract.AnnotationMode, "rdma-shared"), 1, 0, 0), optedIn("t"), ""},
		{"annotations-one-over", pod(many(MaxAnnotations+1, contract.AnnotationMode, "rdma-shared"), 1, 0, 0), optedIn("t"),
			"pod has 257 annotations; accepted: at most 256 on a pod ibkube admits: keep bulk data out of annotations (a ConfigMap or a volume)"},
		{"annotations-over-own-key-only", pod(many(40_000, contract.AnnotationInjected, "x"), 1, 0, 0), optedIn("t"), "pod has 39999 annotations"}, // the one ibkube writes is not counted
		{"annotations-over-namespace-mode", pod(many(MaxAnnotations+1), 1, 0, 0), optedIn("t", contract.AnnotationMode, "rdma-shared"), ""},
		{"annotations-over-not-ours", pod(many(40_000), 1000, 0, 0), optedIn("t"), ""},
		// Within the bound an unknown key makes the pod ibkube's (refused by
		// name); over it only the known keys are looked up.
		{"unknown-key-at-the-limit", pod(many(MaxAnnotations, typo, "8"), 1, 0, 0), optedIn("t"), "annotation infiniband.azure.com/hca: unknown key"},
		{"unknown-key-over-the-limit", pod(many(MaxAnnotations+1, typo, "8"), 1, 0, 0), optedIn("t"), ""},
		{"annotation-at-bound", pod(map[string]string{contract.AnnotationMode: "rdma-shared", contract.AnnotationProfile: strings.Repeat("x", MaxAnnotationBytes)}, 1, 0, 0), optedIn("t"), "unknown profile"},
		{"annotation-over", pod(map[string]string{contract.AnnotationMode: "rdma-shared", contract.AnnotationContainers: strings.Repeat("a,", MaxAnnotationBytes/2+1)}, 1, 0, 0), optedIn("t"),
			"annotation infiniband.azure.com/containers: value of 4098 bytes; accepted: at most 4096 bytes"},
		{"namespace-annotation-over", pod(shared, 1, 0, 0), optedIn("team", contract.AnnotationSocketFallback, strings.Repeat("y", MaxAnnotationBytes+1)),
			"namespace team annotation infiniband.azure.com/socket-fallback: value of 4097 bytes; accepted: at most 4096 bytes"},
		{"networks-over", pod(map[string]string{contract.AnnotationMode: "ipoib", "k8s.v1.cni.cncf.io/networks": strings.Repeat("a,", MaxNetworksBytes/2) + "b"}, 1, 0, 0), optedIn("t"),
			"annotation k8s.v1.cni.cncf.io/networks: value of 16385 bytes; accepted: at most 16384 bytes"},
		{"networks-json-over", pod(map[string]string{contract.AnnotationMode: "ipoib", "k8s.v1.cni.cncf.io/networks": `[{"name":"a","x":"` + strings.Repeat("p", MaxNetworksJSONBytes) + `"}]`}, 1, 0, 0), optedIn("t"),
			"annotation k8s.v1.cni.cncf.io/networks: a JSON value of 4117 bytes; accepted: at most 4096 bytes in the JSON form (16384 as a comma-separated list)"},
		// ibkube's own network, appended at the first admission, is not
		// counted, so the pod is admitted again.
		{"networks-at-limit-readmitted", pod(map[string]string{contract.AnnotationMode: "ipoib", "k8s.v1.cni.cncf.io/networks": strings.Repeat("a,", MaxNetworksBytes/2-1) + "b, ibkube-system/ibkube-ipoib"}, 1, 0, 0), optedIn("t"), ""},
		{"networks-over-not-ipoib", pod(map[string]string{contract.AnnotationMode: "rdma-shared", "k8s.v1.cni.cncf.io/networks": strings.Repeat("a,", MaxNetworksBytes/2) + "b"}, 1, 0, 0), optedIn("t"), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Mutate(tc.pod, tc.ns, testConfig())
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want a refusal containing %q", err, tc.want)
			}
		})
	}
}
