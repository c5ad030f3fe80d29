package mutate

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/ibkube/ibkube/internal/golden"
	"github.com/ibkube/ibkube/webhook/config"
)

func optedIn(name string, kv ...string) Namespace {
	ns := Namespace{Name: name, Labels: map[string]string{LabelInject: InjectEnabled}, Annotations: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		if strings.HasPrefix(kv[i], "pod-security.") || kv[i] == LabelInject {
			ns.Labels[kv[i]] = kv[i+1]
		} else {
			ns.Annotations[kv[i]] = kv[i+1]
		}
	}
	return ns
}

// goldenCases are the realistic pods under testdata/pods with the namespace
// each is admitted in.
var goldenCases = []struct {
	name string
	ns   Namespace
}{
	{"pytorchjob-worker", optedIn("training")},
	{"mpijob-launcher", optedIn("hpc")},
	{"mpijob-worker", optedIn("hpc")},
	{"multi-container", optedIn("research")},
	{"json-networks", optedIn("serving")},
	{"user-set", optedIn("training")},
	{"namespace-defaults", optedIn("team-a", AnnotationMode, "rdma-exclusive,ipoib", AnnotationProfile, "ndv5")},
	{"baseline-namespace", optedIn("restricted-team", LabelPodSecurityEnforce, "baseline")},
	{"envfrom", optedIn("training")},
	{"ipoib-only", optedIn("training")},
	{"oci-roce", optedIn("training")},
}

func testConfig() *config.Config {
	c := config.Default()
	c.ReleaseNamespace = "ibkube-system"
	return c
}

func readPod(t testing.TB, name string) *corev1.Pod {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "pods", name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(data, &pod); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return &pod
}

// goldenFile is what a golden file holds.
type goldenFile struct {
	Warnings []string    `json:"warnings"`
	Patch    []PatchOp   `json:"patch"`
	Pod      *corev1.Pod `json:"pod"`
}

func TestMutateGolden(t *testing.T) {
	t.Parallel()
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pod := readPod(t, tc.name)
			res, err := Mutate(pod, tc.ns, testConfig())
			if err != nil {
				t.Fatalf("Mutate: %v", err)
			}
			if !res.Injected {
				t.Fatalf("Injected = false")
			}
			got, err := yaml.Marshal(goldenFile{Warnings: res.Warnings, Patch: res.Patch, Pod: pod})
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join("testdata", "golden", tc.name+".yaml"), got)
		})
	}
}

func TestMutateLeavesAlone(t *testing.T) {
	t.Parallel()
	gpuPod := func(annos map[string]string) *corev1.Pod {
		p := readPod(t, "namespace-defaults")
		p.Annotations = annos
		return p
	}
	cpuPod := readPod(t, "mpijob-launcher")
	cpuPod.Annotations = nil
	cases := []struct {
		name string
		pod  *corev1.Pod
		ns   Namespace
	}{
		{"namespace not opted in", gpuPod(map[string]string{AnnotationMode: "rdma-shared"}), Namespace{Name: "plain"}},
		{"opt-in label not enabled", gpuPod(map[string]string{AnnotationMode: "rdma-shared"}), Namespace{Name: "x", Labels: map[string]string{LabelInject: "disabled"}}},
		{"no mode anywhere", gpuPod(nil), optedIn("a")},
		{"mode none", gpuPod(map[string]string{AnnotationMode: "none"}), optedIn("a", AnnotationMode, "rdma-shared")},
		{"namespace mode, pod without GPUs", cpuPod, optedIn("a", AnnotationMode, "rdma-shared")},
		{"not opted in, typo ignored", gpuPod(map[string]string{Prefix + "mdoe": "x"}), Namespace{Name: "plain"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			before := tc.pod.DeepCopy()
			res, err := Mutate(tc.pod, tc.ns, testConfig())
			if err != nil {
				t.Fatalf("Mutate: %v", err)
			}
			if res.Injected || len(res.Patch) > 0 || len(res.Warnings) > 0 {
				t.Errorf("Result = %+v, want zero", res)
			}
			if diff := cmp.Diff(before, tc.pod); diff != "" {
				t.Errorf("pod changed (-before +after):\n%s", diff)
			}
		})
	}
}

func TestMutateRefusals(t *testing.T) {
	t.Parallel()
	const profiles = "generic-ib, hb, ndv4, ndv5, oci-h100-roce"
	cases := []struct {
		name  string
		annos map[string]string
		ns    Namespace
		want  string
	}{
		{
			"unknown mode", map[string]string{AnnotationMode: "rdma"}, optedIn("t"),
			`annotation infiniband.azure.com/mode: invalid value "rdma": unknown mode "rdma"; accepted: rdma-shared, rdma-exclusive, ipoib, rdma-shared,ipoib, rdma-exclusive,ipoib, none`,
		},
		{
			"shared and exclusive", map[string]string{AnnotationMode: "rdma-shared,rdma-exclusive"}, optedIn("t"),
			`annotation infiniband.azure.com/mode: invalid value "rdma-shared,rdma-exclusive": rdma-shared and rdma-exclusive exclude each other; accepted: rdma-shared, rdma-exclusive, ipoib, rdma-shared,ipoib, rdma-exclusive,ipoib, none`,
		},
		{
			"none combined", map[string]string{AnnotationMode: "none,ipoib"}, optedIn("t"),
			`annotation infiniband.azure.com/mode: invalid value "none,ipoib": none cannot be combined; accepted: rdma-shared, rdma-exclusive, ipoib, rdma-shared,ipoib, rdma-exclusive,ipoib, none`,
		},
		{
			"bad namespace mode", nil, optedIn("team", AnnotationMode, "fast"),
			`namespace team annotation infiniband.azure.com/mode: invalid value "fast": unknown mode "fast"; accepted: rdma-shared, rdma-exclusive, ipoib, rdma-shared,ipoib, rdma-exclusive,ipoib, none`,
		},
		{
			"hcas not a number", map[string]string{AnnotationMode: "rdma-exclusive", AnnotationHCAs: "eight"}, optedIn("t"),
			`annotation infiniband.azure.com/hcas: invalid value "eight": accepted: an integer from 1 to 64 (HCAs per selected container)`,
		},
		{
			"hcas zero", map[string]string{AnnotationMode: "rdma-exclusive", AnnotationHCAs: "0"}, optedIn("t"),
			`annotation infiniband.azure.com/hcas: invalid value "0": accepted: an integer from 1 to 64 (HCAs per selected container)`,
		},
		{
			"hcas too many", map[string]string{AnnotationMode: "rdma-exclusive", AnnotationHCAs: "65"}, optedIn("t"),
			`annotation infiniband.azure.com/hcas: invalid value "65": accepted: an integer from 1 to 64 (HCAs per selected container)`,
		},
		{
			"unknown container", map[string]string{AnnotationMode: "rdma-shared", AnnotationContainers: "train,trainer"}, optedIn("t"),
			`annotation infiniband.azure.com/containers: invalid value "train,trainer": no container named "trainer"; accepted: a comma-separated list of this pod's containers: train, prep (init), agent (sidecar)`,
		},
		{
			"empty container entry", map[string]string{AnnotationMode: "rdma-shared", AnnotationContainers: "train,"}, optedIn("t"),
			`annotation infiniband.azure.com/containers: invalid value "train,": no container named ""; accepted: a comma-separated list of this pod's containers: train, prep (init), agent (sidecar)`,
		},
		{
			"unknown profile", map[string]string{AnnotationMode: "rdma-shared", AnnotationProfile: "ndv6"}, optedIn("t"),
			`annotation infiniband.azure.com/profile: invalid value "ndv6": unknown profile; accepted: ` + profiles,
		},
		{
			"unknown namespace profile", map[string]string{AnnotationMode: "rdma-shared"}, optedIn("team", AnnotationProfile, "nd"),
			`namespace team annotation infiniband.azure.com/profile: invalid value "nd": unknown profile; accepted: ` + profiles,
		},
		{
			"typo under the prefix", map[string]string{AnnotationMode: "rdma-shared", Prefix + "hca": "8"}, optedIn("t"),
			`annotation infiniband.azure.com/hca: unknown key under infiniband.azure.com/; accepted keys: mode, hcas, containers, profile (and injected, memlock, nccl-conf, written by ibkube)`,
		},
		{
			"pod-level inject label as annotation", map[string]string{Prefix + "inject": "enabled"}, optedIn("t"),
			`annotation infiniband.azure.com/inject: unknown key under infiniband.azure.com/; accepted keys: mode, hcas, containers, profile (and injected, memlock, nccl-conf, written by ibkube)`,
		},
		{
			"bad memlock", map[string]string{AnnotationMode: "rdma-shared", AnnotationMemlock: "lots"}, optedIn("t"),
			`annotation infiniband.azure.com/memlock: invalid value "lots": not a quantity; want "unlimited" or a positive whole number of bytes as a Kubernetes quantity such as "64Gi"`,
		},
		{
			// The node agent cannot apply 0.1 byte, so admission refuses it.
			"fractional memlock", map[string]string{AnnotationMode: "rdma-shared", AnnotationMemlock: "100m"}, optedIn("t"),
			`annotation infiniband.azure.com/memlock: invalid value "100m": not a whole number of bytes; want "unlimited" or a positive whole number of bytes as a Kubernetes quantity such as "64Gi"`,
		},
		{
			"overflowing memlock", map[string]string{AnnotationMode: "rdma-shared", AnnotationMemlock: "1e99"}, optedIn("t"),
			`annotation infiniband.azure.com/memlock: invalid value "1e99": too large (below 8Ei); want "unlimited" or a positive whole number of bytes as a Kubernetes quantity such as "64Gi"`,
		},
		{
			"malformed networks", map[string]string{AnnotationMode: "ipoib", "k8s.v1.cni.cncf.io/networks": `[{"name":`}, optedIn("t"),
			`annotation k8s.v1.cni.cncf.io/networks: invalid value "[{\"name\":": `,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			always := corev1.ContainerRestartPolicyAlways
			pod := &corev1.Pod{}
			pod.Name, pod.Namespace, pod.Annotations = "p", "t", tc.annos
			pod.Spec.Containers = []corev1.Container{{Name: "train", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{"nvidia.com/gpu": quantity(8)}}}}
			pod.Spec.InitContainers = []corev1.Container{{Name: "prep"}, {Name: "agent", RestartPolicy: &always}}
			before := pod.DeepCopy()
			_, err := Mutate(pod, tc.ns, testConfig())
			var r *Refusal
			if !errors.As(err, &r) {
				t.Fatalf("err = %v, want a *Refusal", err)
			}
			if strings.HasSuffix(tc.want, ": ") {
				if !strings.HasPrefix(r.Error(), tc.want) {
					t.Errorf("refusal\n got %s\nwant prefix %s", r.Error(), tc.want)
				}
			} else if r.Error() != tc.want {
				t.Errorf("refusal\n got %s\nwant %s", r.Error(), tc.want)
			}
			if diff := cmp.Diff(before, pod); diff != "" {
				t.Errorf("refused pod was changed:\n%s", diff)
			}
		})
	}
}

func TestCapabilityPolicy(t *testing.T) {
	t.Parallel()
	cases := []struct {
		policy  config.CapabilityPolicy
		level   string
		wantCap bool
		warns   int
	}{
		{config.CapabilityAuto, "", true, 0},
		{config.CapabilityAuto, "privileged", true, 0},
		{config.CapabilityAuto, "baseline", false, 1},
		{config.CapabilityAuto, "restricted", false, 1},
		{config.CapabilityAlways, "restricted", true, 0},
		{config.CapabilityNever, "", false, 0},
	}
	for _, tc := range cases {
		t.Run(string(tc.policy)+"/"+tc.level, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig()
			cfg.CapabilityPolicy = tc.policy
			ns := optedIn("t")
			if tc.level != "" {
				ns.Labels[LabelPodSecurityEnforce] = tc.level
			}
			pod := readPod(t, "baseline-namespace")
			res, err := Mutate(pod, ns, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := hasCapability(&pod.Spec.Containers[0], "IPC_LOCK"); got != tc.wantCap {
				t.Errorf("IPC_LOCK added = %v, want %v", got, tc.wantCap)
			}
			if len(res.Warnings) != tc.warns {
				t.Errorf("warnings = %q, want %d", res.Warnings, tc.warns)
			}
			if pod.Annotations[AnnotationMemlock] != "unlimited" {
				t.Errorf("memlock annotation = %q, want unlimited", pod.Annotations[AnnotationMemlock])
			}
		})
	}
}

func TestEscape(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"infiniband.azure.com/mode": "infiniband.azure.com~1mode",
		"a~b/c":                     "a~0b~1c",
		"plain":                     "plain",
	} {
		if got := escape(in); got != want {
			t.Errorf("escape(%q) = %q, want %q", in, got, want)
		}
	}
}

// mustJSON marshals v or fails the test.
func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestEscapeFastPath(t *testing.T) {
	t.Parallel()
	for _, k := range []string{AnnotationNCCLConf, AnnotationMemlock, AnnotationInjected, "k8s.v1.cni.cncf.io/networks"} {
		if got, want := escape(k), strings.ReplaceAll(k, "/", "~1"); got != want {
			t.Errorf("escape(%q) = %q, want %q", k, got, want)
		}
	}
}

// TestReadmeListsKeys keeps the README's annotation reference in step with
// the keys the core accepts.
func TestReadmeListsKeys(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range userKeys {
		if !strings.Contains(string(readme), "| `"+k+"` |") {
			t.Errorf("README annotation table lacks user key %q", k)
		}
	}
	for _, k := range ownKeys {
		if !strings.Contains(string(readme), "`"+Prefix+k+"`") {
			t.Errorf("README lacks ibkube-written key %q", Prefix+k)
		}
	}
}
