package mutate

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/internal/testing/golden"
	"github.com/ibkube/ibkube/webhook/aligned"
	"github.com/ibkube/ibkube/webhook/config"
)

func optedIn(name string, kv ...string) Namespace {
	ns := Namespace{Name: name, Labels: map[string]string{contract.LabelInject: contract.InjectEnabled}, Annotations: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		if strings.HasPrefix(kv[i], "pod-security.") || kv[i] == contract.LabelInject {
			ns.Labels[kv[i]] = kv[i+1]
		} else {
			ns.Annotations[kv[i]] = kv[i+1]
		}
	}
	return ns
}

// goldenCases are the realistic pods under testdata/pods with the namespace
// each is admitted in and the config it is admitted with (the aligned- pods
// with alignedClaims on).
var goldenCases = []struct {
	name string
	ns   Namespace
	cfg  *config.Config
}{
	{"pytorchjob-worker", optedIn("training"), testConfig()},
	{"mpijob-launcher", optedIn("hpc"), testConfig()},
	{"mpijob-worker", optedIn("hpc"), testConfig()},
	{"multi-container", optedIn("research"), testConfig()},
	{"json-networks", optedIn("serving"), testConfig()},
	{"user-set", optedIn("training"), testConfig()},
	{"namespace-defaults", optedIn("team-a", contract.AnnotationMode, "rdma-exclusive,ipoib", contract.AnnotationProfile, "ndv5"), testConfig()},
	{"baseline-namespace", optedIn("restricted-team", LabelPodSecurityEnforce, "baseline"), testConfig()},
	{"envfrom", optedIn("training"), testConfig()},
	{"ipoib-only", optedIn("training"), testConfig()},
	{"oci-roce", optedIn("training"), testConfig()},
	{"oci-hostpath", optedIn("training"), testConfig()},
	{"ndv5-partial-1gpu", optedIn("training"), testConfig()},
	{"ndv5-partial-2gpu", optedIn("training"), testConfig()},
	{"ndv5-partial-4gpu", optedIn("training"), testConfig()},
	{"fail-closed", optedIn("training"), testConfig()},
	{"mi300x", optedIn("hpc", contract.AnnotationMode, "rdma-exclusive"), testConfig()},
	{"jobset-worker", optedIn("training"), testConfig()},
	{"job-own-affinity", optedIn("training"), testConfig()},
	{"job-placement-any", optedIn("training"), testConfig()},
	{"job-other-affinity", optedIn("training"), testConfig()},
	{"lws-worker", optedIn("serving"), testConfig()},
	{"batch-job-shared", optedIn("training"), testConfig()},
	{"aligned-ndv5-4gpu", optedIn("training"), alignedConfig()},
	{"aligned-oci-roce", optedIn("training"), alignedConfig()},
	{"aligned-two-containers", optedIn("serving"), alignedConfig()},
	{"aligned-own-claims", optedIn("training"), alignedConfig()},
	{"aligned-too-many-hcas", optedIn("training"), alignedConfig()},
	{"aligned-shape-not-kept", optedIn("training"), alignedConfig()},
}

func testConfig() *config.Config {
	c := config.Default()
	c.ReleaseNamespace = "ibkube-system"
	return c
}

func readPod(t testing.TB, name string) *corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	golden.ReadYAML(t, filepath.Join("testdata", "pods", name+".yaml"), &pod)
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
			res, err := Mutate(pod, tc.ns, tc.cfg)
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
		{"namespace not opted in", gpuPod(map[string]string{contract.AnnotationMode: "rdma-shared"}), Namespace{Name: "plain"}},
		{"opt-in label not enabled", gpuPod(map[string]string{contract.AnnotationMode: "rdma-shared"}), Namespace{Name: "x", Labels: map[string]string{contract.LabelInject: "disabled"}}},
		{"no mode anywhere", gpuPod(nil), optedIn("a")},
		{"mode none", gpuPod(map[string]string{contract.AnnotationMode: "none"}), optedIn("a", contract.AnnotationMode, "rdma-shared")},
		{"namespace mode, pod without GPUs", cpuPod, optedIn("a", contract.AnnotationMode, "rdma-shared")},
		{"not opted in, typo ignored", gpuPod(map[string]string{contract.Prefix + "mdoe": "x"}), Namespace{Name: "plain"}},
		// A namespace default matters only to the pods it applies to.
		{"bad namespace socket-fallback, no mode", gpuPod(nil), optedIn("a", contract.AnnotationSocketFallback, "x")},
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
	profiles := strings.Join(testConfig().ProfileNames(), ", ")
	hcasAccepted := fmt.Sprintf("accepted: an integer from 1 to %d (HCAs per selected container)", config.MaxHCAs)
	tooMany := strconv.Itoa(config.MaxHCAs + 1)
	cases := []struct {
		name  string
		annos map[string]string
		ns    Namespace
		want  string
	}{
		{
			"unknown mode", map[string]string{contract.AnnotationMode: "rdma"}, optedIn("t"),
			`annotation infiniband.azure.com/mode: invalid value "rdma": unknown mode "rdma"; accepted: ` + contract.AcceptedModes,
		},
		{
			"shared and exclusive", map[string]string{contract.AnnotationMode: "rdma-shared,rdma-exclusive"}, optedIn("t"),
			`annotation infiniband.azure.com/mode: invalid value "rdma-shared,rdma-exclusive": rdma-shared and rdma-exclusive exclude each other; accepted: ` + contract.AcceptedModes,
		},
		{
			"none combined", map[string]string{contract.AnnotationMode: "none,ipoib"}, optedIn("t"),
			`annotation infiniband.azure.com/mode: invalid value "none,ipoib": none cannot be combined; accepted: ` + contract.AcceptedModes,
		},
		{
			"bad namespace mode", nil, optedIn("team", contract.AnnotationMode, "fast"),
			`namespace team annotation infiniband.azure.com/mode: invalid value "fast": unknown mode "fast"; accepted: ` + contract.AcceptedModes,
		},
		{
			"hcas not a number", map[string]string{contract.AnnotationMode: "rdma-exclusive", contract.AnnotationHCAs: "eight"}, optedIn("t"),
			`annotation infiniband.azure.com/hcas: invalid value "eight": ` + hcasAccepted,
		},
		{
			"hcas zero", map[string]string{contract.AnnotationMode: "rdma-exclusive", contract.AnnotationHCAs: "0"}, optedIn("t"),
			`annotation infiniband.azure.com/hcas: invalid value "0": ` + hcasAccepted,
		},
		{
			"hcas too many", map[string]string{contract.AnnotationMode: "rdma-exclusive", contract.AnnotationHCAs: tooMany}, optedIn("t"),
			`annotation infiniband.azure.com/hcas: invalid value "` + tooMany + `": ` + hcasAccepted,
		},
		{
			"unknown container", map[string]string{contract.AnnotationMode: "rdma-shared", contract.AnnotationContainers: "train,trainer"}, optedIn("t"),
			`annotation infiniband.azure.com/containers: invalid value "train,trainer": no container named "trainer"; accepted: a comma-separated list of this pod's containers: train, prep (init), agent (sidecar)`,
		},
		{
			"empty container entry", map[string]string{contract.AnnotationMode: "rdma-shared", contract.AnnotationContainers: "train,"}, optedIn("t"),
			`annotation infiniband.azure.com/containers: invalid value "train,": no container named ""; accepted: a comma-separated list of this pod's containers: train, prep (init), agent (sidecar)`,
		},
		{
			"unknown profile", map[string]string{contract.AnnotationMode: "rdma-shared", contract.AnnotationProfile: "ndv6"}, optedIn("t"),
			`annotation infiniband.azure.com/profile: invalid value "ndv6": unknown profile; accepted: ` + profiles,
		},
		{
			"unknown namespace profile", map[string]string{contract.AnnotationMode: "rdma-shared"}, optedIn("team", contract.AnnotationProfile, "nd"),
			`namespace team annotation infiniband.azure.com/profile: invalid value "nd": unknown profile; accepted: ` + profiles,
		},
		{
			"typo under the prefix", map[string]string{contract.AnnotationMode: "rdma-shared", contract.Prefix + "hca": "8"}, optedIn("t"),
			`annotation infiniband.azure.com/hca: unknown key under infiniband.azure.com/; accepted keys: ` + contract.AcceptedKeys(),
		},
		{
			"pod-level inject label as annotation", map[string]string{contract.Prefix + "inject": "enabled"}, optedIn("t"),
			`annotation infiniband.azure.com/inject: unknown key under infiniband.azure.com/; accepted keys: ` + contract.AcceptedKeys(),
		},
		{
			"bad memlock", map[string]string{contract.AnnotationMode: "rdma-shared", contract.AnnotationMemlock: "lots"}, optedIn("t"),
			`annotation infiniband.azure.com/memlock: invalid value "lots": not a quantity; want "unlimited" or a positive whole number of bytes as a Kubernetes quantity such as "64Gi"`,
		},
		{
			// The node agent cannot apply 0.1 byte, so admission refuses it.
			"fractional memlock", map[string]string{contract.AnnotationMode: "rdma-shared", contract.AnnotationMemlock: "100m"}, optedIn("t"),
			`annotation infiniband.azure.com/memlock: invalid value "100m": not a whole number of bytes; want "unlimited" or a positive whole number of bytes as a Kubernetes quantity such as "64Gi"`,
		},
		{
			"overflowing memlock", map[string]string{contract.AnnotationMode: "rdma-shared", contract.AnnotationMemlock: "1e99"}, optedIn("t"),
			`annotation infiniband.azure.com/memlock: invalid value "1e99": too large (below 8Ei); want "unlimited" or a positive whole number of bytes as a Kubernetes quantity such as "64Gi"`,
		},
		{
			// The README lists a bad memlock as a refusal whatever the mode.
			"bad memlock without a mode", map[string]string{contract.AnnotationMemlock: "lots"}, optedIn("t"),
			`annotation infiniband.azure.com/memlock: invalid value "lots": not a quantity; want "unlimited" or a positive whole number of bytes as a Kubernetes quantity such as "64Gi"`,
		},
		{
			"bad memlock with mode none", map[string]string{contract.AnnotationMode: "none", contract.AnnotationMemlock: "-1"}, optedIn("t", contract.AnnotationMode, "rdma-shared"),
			`annotation infiniband.azure.com/memlock: invalid value "-1": not positive; want "unlimited" or a positive whole number of bytes as a Kubernetes quantity such as "64Gi"`,
		},
		{
			"bad socket-fallback", map[string]string{contract.AnnotationMode: "rdma-shared", contract.AnnotationSocketFallback: "never"}, optedIn("t"),
			`annotation infiniband.azure.com/socket-fallback: invalid value "never": accepted: allow (NCCL may fall back to TCP sockets, NCCL's default) or deny (NCCL fails instead)`,
		},
		{
			"bad socket-fallback with mode none", map[string]string{contract.AnnotationMode: "none", contract.AnnotationSocketFallback: "Deny"}, optedIn("t"),
			`annotation infiniband.azure.com/socket-fallback: invalid value "Deny": accepted: allow (NCCL may fall back to TCP sockets, NCCL's default) or deny (NCCL fails instead)`,
		},
		{
			"bad rdma-idle-warning", map[string]string{contract.AnnotationMode: "rdma-shared", contract.AnnotationIdleWarning: "off"}, optedIn("t"),
			`annotation infiniband.azure.com/rdma-idle-warning: invalid value "off"; accepted: true, false`,
		},
		{
			"bad placement", map[string]string{contract.AnnotationMode: "rdma-exclusive", contract.AnnotationPlacement: "same-rack"}, optedIn("t"),
			`annotation infiniband.azure.com/placement: invalid value "same-rack"; accepted: partition (the job's pods on one InfiniBand partition, the default), any (anywhere)`,
		},
		{
			"bad placement with mode none", map[string]string{contract.AnnotationMode: "none", contract.AnnotationPlacement: "Any"}, optedIn("t"),
			`annotation infiniband.azure.com/placement: invalid value "Any"; accepted: partition (the job's pods on one InfiniBand partition, the default), any (anywhere)`,
		},
		{
			"bad namespace socket-fallback", map[string]string{contract.AnnotationMode: "rdma-shared"}, optedIn("team", contract.AnnotationSocketFallback, "no"),
			`namespace team annotation infiniband.azure.com/socket-fallback: invalid value "no": accepted: allow (NCCL may fall back to TCP sockets, NCCL's default) or deny (NCCL fails instead)`,
		},
		{
			"malformed networks", map[string]string{contract.AnnotationMode: "ipoib", "k8s.v1.cni.cncf.io/networks": `[{"name":`}, optedIn("t"),
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
			if pod.Annotations[contract.AnnotationMemlock] != "unlimited" {
				t.Errorf("memlock annotation = %q, want unlimited", pod.Annotations[contract.AnnotationMemlock])
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
	for _, k := range []string{contract.AnnotationNCCLConf, contract.AnnotationMemlock, contract.AnnotationInjected, "k8s.v1.cni.cncf.io/networks"} {
		if got, want := escape(k), strings.ReplaceAll(k, "/", "~1"); got != want {
			t.Errorf("escape(%q) = %q, want %q", k, got, want)
		}
	}
}

// TestExclusiveCountBounds checks the rdma-exclusive count taken from a GPU
// count: the profile's HCAs per GPU multiply it, and a count outside 1..64
// is refused instead of becoming a resource quantity such as rdma/ib: "-8".
func TestExclusiveCountBounds(t *testing.T) {
	t.Parallel()
	// refused is the refusal of a GPU count that gives no count within
	// 1..MaxHCAs at perGPU HCAs per GPU.
	refused := func(gpus string, perGPU int, profile string) string {
		return fmt.Sprintf(`container "train" requests nvidia.com/gpu: %s, which gives no rdma-exclusive count from 1 to %d (%d HCA(s) per GPU, profile %s); `+
			`accepted: a GPU count from 1 to %d, or annotation %s with an integer from 1 to %d`,
			gpus, config.MaxHCAs, perGPU, profile, config.MaxHCAs/perGPU, contract.AnnotationHCAs, config.MaxHCAs)
	}
	overTwoPerGPU := strconv.Itoa(config.MaxHCAs/2 + 1)
	cases := []struct {
		name, profile, gpus string
		hcas                string // annotation; "" for none
		wantRes             string
		want                int64
		refusal             string
	}{
		{"ib 8 GPUs", "ndv5", "8", "", "rdma/ib", 8, ""},
		{"roce 8 GPUs, 2 per GPU", "oci-h100-roce", "8", "", "rdma/roce", 16, ""},
		{"roce H200 1 per GPU", "oci-h200-roce", "8", "", "rdma/roce", 8, ""},
		{"annotation wins over HCAs per GPU", "oci-h100-roce", "8", "4", "rdma/roce", 4, ""},
		{"fractional GPU rounds up", "ndv5", "500m", "", "rdma/ib", 1, ""},
		{"negative GPUs", "ndv5", "-8", "", "", 0, refused("-8", 1, "ndv5")},
		{"huge GPU count", "ndv5", "1e9", "", "", 0, refused("more than 1000000", 1, "ndv5")},
		{"hugely negative GPU count", "ndv5", "-8Ei", "", "", 0, refused("less than -1000000", 1, "ndv5")},
		{"GPU count at the number a refusal repeats", "ndv5", "1000000", "", "", 0, refused("1000000", 1, "ndv5")},
		{"too many GPUs for 2 per GPU", "oci-h100-roce", overTwoPerGPU, "", "", 0, refused(overTwoPerGPU, 2, "oci-h100-roce")},
		{"negative GPUs with hcas annotation", "ndv5", "-8", "2", "rdma/ib", 2, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pod := &corev1.Pod{}
			pod.Name, pod.Namespace = "p", "t"
			pod.Annotations = map[string]string{contract.AnnotationMode: "rdma-exclusive", contract.AnnotationProfile: tc.profile, contract.AnnotationContainers: "train"}
			if tc.hcas != "" {
				pod.Annotations[contract.AnnotationHCAs] = tc.hcas
			}
			pod.Spec.Containers = []corev1.Container{{Name: "train", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(tc.gpus)}}}}
			_, err := Mutate(pod, optedIn("t"), testConfig())
			if tc.refusal != "" {
				if err == nil || err.Error() != tc.refusal {
					t.Fatalf("err = %v\nwant %s", err, tc.refusal)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := pod.Spec.Containers[0].Resources.Limits[corev1.ResourceName(tc.wantRes)]
			if got.Value() != tc.want {
				t.Errorf("%s = %s, want %d (limits %v)", tc.wantRes, got.String(), tc.want, pod.Spec.Containers[0].Resources.Limits)
			}
		})
	}
}

// TestGDRLevelByShape checks that the whole-machine NCCL_NET_GDR_LEVEL=SYS
// of the ND profiles reaches only pods whose GPU containers hold all the
// machine's GPUs, where every GPU has its HCA beside it.
func TestGDRLevelByShape(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		profile string
		gpus    []string // per container
		want    bool
	}{
		{"8 of 8", "ndv5", []string{"8"}, true},
		{"4 of 8", "ndv5", []string{"4"}, false},
		{"2 of 8", "ndv4", []string{"2"}, false},
		{"1 of 8", "ndv5", []string{"1"}, false},
		{"two containers of 4", "ndv5", []string{"4", "4"}, false},
		{"8 with a GPU-less sidecar selected", "ndv5", []string{"8", "0"}, true},
		{"generic profile states no GPUs per node", "generic-ib", []string{"8"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pod := &corev1.Pod{}
			pod.Name, pod.Namespace = "p", "t"
			var names []string
			for i, g := range tc.gpus {
				c := corev1.Container{Name: fmt.Sprintf("c%d", i)}
				if g != "0" {
					c.Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(g)}
				}
				pod.Spec.Containers = append(pod.Spec.Containers, c)
				names = append(names, c.Name)
			}
			pod.Annotations = map[string]string{contract.AnnotationMode: "rdma-exclusive", contract.AnnotationProfile: tc.profile, contract.AnnotationContainers: strings.Join(names, ",")}
			if _, err := Mutate(pod, optedIn("t"), testConfig()); err != nil {
				t.Fatal(err)
			}
			conf := pod.Annotations[contract.AnnotationNCCLConf]
			if got := strings.Contains(conf, "\nNCCL_NET_GDR_LEVEL=SYS\n"); got != tc.want {
				t.Errorf("NCCL_NET_GDR_LEVEL=SYS in conf = %v, want %v:\n%s", got, tc.want, conf)
			}
		})
	}
}

// TestSocketFallback checks where NCCL_NET=IB (fail instead of falling back
// to sockets) comes from and where it is ignored.
func TestSocketFallback(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		pod, ns  string // socket-fallback annotations; "" for none
		mode     string
		want     bool
		warnings int
	}{
		{"default allows", "", "", "rdma-exclusive", false, 0},
		{"pod deny", "deny", "", "rdma-exclusive", true, 0},
		{"namespace deny", "", "deny", "rdma-shared", true, 0},
		{"pod allow beats namespace deny", "allow", "deny", "rdma-shared", false, 0},
		{"ipoib only: nothing to deny", "deny", "", "ipoib", false, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pod := readPod(t, "namespace-defaults")
			pod.Annotations = map[string]string{contract.AnnotationMode: tc.mode}
			if tc.pod != "" {
				pod.Annotations[contract.AnnotationSocketFallback] = tc.pod
			}
			ns := optedIn("team-a")
			if tc.ns != "" {
				ns.Annotations[contract.AnnotationSocketFallback] = tc.ns
			}
			res, err := Mutate(pod, ns, testConfig())
			if err != nil {
				t.Fatal(err)
			}
			conf := pod.Annotations[contract.AnnotationNCCLConf]
			if got := strings.Contains(conf, "\nNCCL_NET=IB\n"); got != tc.want {
				t.Errorf("NCCL_NET=IB in conf = %v, want %v:\n%s", got, tc.want, conf)
			}
			if len(res.Warnings) != tc.warnings {
				t.Errorf("warnings %q, want %d", res.Warnings, tc.warnings)
			}
		})
	}
}

// TestRefusalEchoBounded checks that a huge bad value is echoed cut, with a
// marker, so a 1 MiB annotation does not become a larger refusal and log line.
func TestRefusalEchoBounded(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("x", 1<<20)
	for _, annos := range []map[string]string{
		{contract.AnnotationMode: huge},
		{contract.AnnotationMode: "rdma-shared", contract.AnnotationMemlock: huge},
		{contract.AnnotationMemlock: huge},
		{contract.AnnotationMode: "rdma-shared", contract.AnnotationProfile: huge},
		{contract.AnnotationMode: "rdma-exclusive", contract.AnnotationHCAs: huge},
		{contract.AnnotationMode: "rdma-shared", contract.AnnotationContainers: huge},
		{contract.AnnotationMode: "ipoib", "k8s.v1.cni.cncf.io/networks": "[" + huge},
		{contract.AnnotationMode: "rdma-shared", contract.AnnotationSocketFallback: huge},
		{contract.AnnotationMode: "rdma-shared", contract.Prefix + huge: "1"},
	} {
		pod := readPod(t, "namespace-defaults")
		pod.Annotations = annos
		_, err := Mutate(pod, optedIn("t"), testConfig())
		if err == nil {
			t.Fatalf("no refusal for a 1 MiB value")
		}
		// Either the value is cut with a marker, or, for a value ibkube
		// parses, refused by its size without being repeated.
		if msg := err.Error(); len(msg) > 2048 || (!strings.Contains(msg, "more bytes]") && !strings.Contains(msg, "bytes; accepted: at most")) {
			t.Errorf("refusal of %d bytes, want at most 2048 with a cut marker or a size refusal: %.300s", len(msg), msg)
		}
	}
	// A long name in a warning is cut as well.
	pod := readPod(t, "namespace-defaults")
	pod.Annotations = map[string]string{contract.AnnotationMode: "rdma-exclusive"}
	pod.Spec.Containers[0].Name = huge
	pod.Spec.Containers[0].Resources.Limits["rdma/ib"] = quantity(3)
	res, err := Mutate(pod, optedIn("t"), testConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range res.Warnings {
		if len(w) > maxMessage+64 {
			t.Errorf("warning of %d bytes", len(w))
		}
	}
	if len(res.Warnings) == 0 {
		t.Error("no warning for the kept rdma/ib count")
	}
}

// alignedConfig is testConfig with the aligned GPU+HCA claim turned on.
func alignedConfig() *config.Config {
	c := testConfig()
	c.AlignedClaims.Enabled = true
	return c
}

// TestAlignedLeavesExtendedResources: with the feature off, in modes
// without exclusive HCAs and for pods without GPUs, no claim is added and
// the GPUs stay where the user wrote them.
func TestAlignedLeavesExtendedResources(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, pod, mode string
		cfg             *config.Config
	}{
		{"feature off", "aligned-ndv5-4gpu", "", testConfig()},
		{"rdma-shared", "aligned-ndv5-4gpu", "rdma-shared", alignedConfig()},
		{"ipoib only", "aligned-ndv5-4gpu", "ipoib", alignedConfig()},
		{"no GPUs", "mpijob-launcher", "rdma-exclusive", alignedConfig()},
		{"own claims", "aligned-own-claims", "", alignedConfig()},
		{"beyond a claim's bounds", "aligned-too-many-hcas", "", alignedConfig()},
		{"no template kept for the shape", "aligned-shape-not-kept", "", alignedConfig()},
		// amd.com/gpu is not what alignedClaims.gpuDeviceClass serves.
		{"another GPU resource", "mi300x", "rdma-exclusive", alignedConfig()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pod := readPod(t, tc.pod)
			if tc.mode != "" {
				pod.Annotations[contract.AnnotationMode] = tc.mode
			}
			before := pod.DeepCopy()
			if _, err := Mutate(pod, optedIn(pod.Namespace), tc.cfg); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(before.Spec.ResourceClaims, pod.Spec.ResourceClaims); diff != "" {
				t.Errorf("resourceClaims changed (-before +after):\n%s", diff)
			}
			for i, c := range before.Spec.Containers {
				if g := gpuCount(&c, contract.ResourceGPU); g != gpuCount(&pod.Spec.Containers[i], contract.ResourceGPU) {
					t.Errorf("container %q: GPUs %d, now %d", c.Name, g, gpuCount(&pod.Spec.Containers[i], contract.ResourceGPU))
				}
			}
		})
	}
}

// TestAlignedShapes pins the templates the controller keeps for the
// built-in profiles: a change to a profile's counts shows here.
func TestAlignedShapes(t *testing.T) {
	t.Parallel()
	if got := AlignedShapes(testConfig()); len(got) != 0 {
		t.Errorf("feature off: %d shapes, want none", len(got))
	}
	var b strings.Builder
	for _, s := range AlignedShapes(alignedConfig()) {
		fmt.Fprintf(&b, "%s %s\n", s.Name(), s.GPUClass)
	}
	golden.Check(t, filepath.Join("testdata", "golden", "aligned-shapes.txt"), []byte(b.String()))
}

// TestKeptIsAlignedShapes: admission's membership test answers as the
// list the controller writes, over every shape up to a claim's bounds.
func TestKeptIsAlignedShapes(t *testing.T) {
	t.Parallel()
	cfg := alignedConfig()
	list := map[aligned.Shape]bool{}
	for _, s := range AlignedShapes(cfg) {
		list[s] = true
	}
	classes := []string{contract.DeviceClassIB, contract.DeviceClassRoCE, contract.DeviceClassSharedIB}
	for g := 1; g <= aligned.MaxHCAs+1; g++ {
		for h := 1; h <= aligned.MaxHCAs+1; h++ {
			for _, class := range classes {
				for _, gpuClass := range []string{cfg.AlignedClaims.GPUDeviceClass, "gpu.amd.com"} {
					s := aligned.Shape{GPUs: g, HCAs: h, GPUClass: gpuClass, HCAClass: class}
					if kept(cfg, s) != list[s] {
						t.Errorf("kept(%s, %s) = %t, AlignedShapes lists it: %t", s.Name(), gpuClass, kept(cfg, s), list[s])
					}
				}
			}
		}
	}
}
