// Package corpus is the set of pods the admission policies are proven
// equivalent to webhook/mutate on: the mutation core's golden corpus, the
// handler's pod, the inputs of the core's property tests and its refusal
// table, each with the namespace it is admitted in and the configuration.
// The in-process test (webhook/policy) and the API server test
// (test/integration/policy) both run it; only tests import it.
package corpus

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/webhook/config"
	"github.com/ibkube/ibkube/webhook/mutate"
)

// Case is one admission.
type Case struct {
	Name   string
	Pod    *corev1.Pod
	NS     mutate.Namespace
	Config string // a key of Configs
}

// ReleaseNamespace is where the tests install ibkube.
const ReleaseNamespace = "ibkube-system"

// Configs are the configurations the corpus runs under: the default one,
// and the one the property tests add (IPC_LOCK never, a fixed IPoIB
// interface name).
func Configs() map[string]*config.Config {
	def := config.Default()
	def.ReleaseNamespace = ReleaseNamespace
	never := config.Default()
	never.ReleaseNamespace = ReleaseNamespace
	never.CapabilityPolicy = config.CapabilityNever
	never.IPoIB.Interface = "ib0"
	return map[string]*config.Config{"default": def, "never+ifname": never}
}

func optedIn(name string, kv ...string) mutate.Namespace {
	ns := mutate.Namespace{Name: name, Labels: map[string]string{contract.LabelInject: contract.InjectEnabled}, Annotations: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		if strings.HasPrefix(kv[i], "pod-security.") {
			ns.Labels[kv[i]] = kv[i+1]
		} else {
			ns.Annotations[kv[i]] = kv[i+1]
		}
	}
	return ns
}

// goldenNamespaces are webhook/mutate's goldenCases: the namespace each
// pod under testdata/pods is admitted in.
var goldenNamespaces = map[string]mutate.Namespace{
	"pytorchjob-worker":  optedIn("training"),
	"mpijob-launcher":    optedIn("hpc"),
	"mpijob-worker":      optedIn("hpc"),
	"multi-container":    optedIn("research"),
	"json-networks":      optedIn("serving"),
	"user-set":           optedIn("training"),
	"namespace-defaults": optedIn("team-a", contract.AnnotationMode, "rdma-exclusive,ipoib", contract.AnnotationProfile, "ndv5"),
	"baseline-namespace": optedIn("restricted-team", mutate.LabelPodSecurityEnforce, "baseline"),
	"envfrom":            optedIn("training"),
	"ipoib-only":         optedIn("training"),
	"oci-roce":           optedIn("training"),
	"oci-hostpath":       optedIn("training"),
	"ndv5-partial-1gpu":  optedIn("training"),
	"ndv5-partial-2gpu":  optedIn("training"),
	"ndv5-partial-4gpu":  optedIn("training"),
	"fail-closed":        optedIn("training"),
	"jobset-worker":      optedIn("training"),
	"job-own-affinity":   optedIn("training"),
	"job-placement-any":  optedIn("training"),
	"job-other-affinity": optedIn("training"),
	"lws-worker":         optedIn("serving"),
	"batch-job-shared":   optedIn("training"),
	"mi300x":             optedIn("hpc", contract.AnnotationMode, "rdma-exclusive"),
	// Admitted with the default config, where alignedClaims is off.
	"aligned-ndv5-4gpu":      optedIn("training"),
	"aligned-oci-roce":       optedIn("training"),
	"aligned-two-containers": optedIn("serving"),
	"aligned-own-claims":     optedIn("training"),
	"aligned-too-many-hcas":  optedIn("training"),
	"aligned-shape-not-kept": optedIn("training"),
}

func readPod(path string) (*corev1.Pod, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(data, &pod); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &pod, nil
}

func podJSON(s string) *corev1.Pod {
	var p corev1.Pod
	if err := json.Unmarshal([]byte(s), &p); err != nil {
		panic(fmt.Sprintf("corpus pod %s: %v", s, err)) // a literal below, covered by every test
	}
	return &p
}

// Load returns every case; root is the repository root.
func Load(root string) ([]Case, error) {
	var cases []Case
	add := func(name string, pod *corev1.Pod, ns mutate.Namespace) {
		for _, cfg := range []string{"default", "never+ifname"} {
			p := pod.DeepCopy()
			if p.Name == "" {
				p.Name = "p"
			}
			p.Namespace = ns.Name
			cases = append(cases, Case{Name: name + "/" + cfg, Pod: p, NS: ns, Config: cfg})
		}
	}
	dir := filepath.Join(root, "webhook", "mutate", "testdata", "pods")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		ns, ok := goldenNamespaces[name]
		if !ok {
			return nil, fmt.Errorf("%s: no namespace for this golden pod in the policy corpus (internal/testing/corpus goldenNamespaces)", f)
		}
		pod, err := readPod(f)
		if err != nil {
			return nil, err
		}
		add("golden/"+name, pod, ns)
		// The property tests also admit each golden pod a second time.
		if m, err := mutateCopy(pod, ns); err == nil && m != nil {
			add("golden-readmitted/"+name, m, ns)
		}
	}
	worker, err := readPod(filepath.Join(root, "webhook", "handler", "testdata", "worker-8gpu.yaml"))
	if err != nil {
		return nil, err
	}
	worker.GenerateName, worker.Name = "", "worker"
	add("handler/worker-8gpu", worker, optedIn("training"))

	// webhook/mutate TestPatchOnEmptyObjects
	empty := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "x"}, {Name: "b", Image: "x", SecurityContext: &corev1.SecurityContext{}}}}}
	for _, mode := range []string{"rdma-shared,ipoib", "rdma-exclusive", "ipoib"} {
		p := empty.DeepCopy()
		p.Annotations = map[string]string{contract.AnnotationMode: mode}
		add("empty/pod-mode-"+mode, p, optedIn("x"))
		add("empty/ns-mode-"+mode, empty, optedIn("x", contract.AnnotationMode, mode))
	}
	// webhook/mutate FuzzMutate seeds
	seed, err := readPod(filepath.Join(dir, "multi-container.yaml"))
	if err != nil {
		return nil, err
	}
	withAnnos := func(p *corev1.Pod, kv ...string) *corev1.Pod {
		p = p.DeepCopy()
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		for i := 0; i+1 < len(kv); i += 2 {
			p.Annotations[kv[i]] = kv[i+1]
		}
		return p
	}
	add("fuzz-seed/exclusive-hcas-containers", withAnnos(seed, contract.AnnotationMode, "rdma-exclusive,ipoib", contract.AnnotationHCAs, "3",
		contract.AnnotationContainers, "warmup,data-cache", "k8s.v1.cni.cncf.io/networks", `[{"name":"a"}]`), optedIn("fuzz"))
	add("fuzz-seed/restricted-ipoib", withAnnos(seed, contract.AnnotationMode, "ipoib", contract.AnnotationContainers, "metrics",
		"k8s.v1.cni.cncf.io/networks", "x/y@net1, z"), optedIn("fuzz", mutate.LabelPodSecurityEnforce, "restricted"))
	add("fuzz-seed/user-conf-file", podJSON(`{"metadata":{"annotations":{"infiniband.azure.com/mode":"ipoib","k8s.v1.cni.cncf.io/networks":"a,b@net1"}},"spec":{"containers":[{"name":"a","image":"x","env":[{"name":"NCCL_CONF_FILE","value":"/x"}]}]}}`), optedIn("fuzz"))
	add("fuzz-seed/negative-gpus", podJSON(`{"metadata":{"annotations":{"infiniband.azure.com/profile":"oci-h100-roce","infiniband.azure.com/socket-fallback":"deny","infiniband.azure.com/mode":"rdma-exclusive"}},"spec":{"containers":[{"name":"a","image":"x","resources":{"limits":{"nvidia.com/gpu":"-8"}}},{"name":"b","image":"x","securityContext":{"privileged":true}}]}}`), optedIn("fuzz"))
	add("fuzz-seed/mi300x-hostpath", podJSON(`{"metadata":{"annotations":{"infiniband.azure.com/profile":"ndv5-mi300x"}},"spec":{"containers":[{"name":"a","image":"x","resources":{"limits":{"amd.com/gpu":"4"}},"volumeMounts":[{"name":"d","mountPath":"/dev/infiniband"}]}],"volumes":[{"name":"d","hostPath":{"path":"/dev"}}]}}`), optedIn("fuzz", contract.AnnotationMode, "rdma-exclusive"))

	// webhook/mutate TestMutateLeavesAlone
	nsDefaults, err := readPod(filepath.Join(dir, "namespace-defaults.yaml"))
	if err != nil {
		return nil, err
	}
	launcher, err := readPod(filepath.Join(dir, "mpijob-launcher.yaml"))
	if err != nil {
		return nil, err
	}
	launcher.Annotations = nil
	gpuPod := func(kv ...string) *corev1.Pod {
		p := nsDefaults.DeepCopy()
		p.Annotations = nil
		return withAnnos(p, kv...)
	}
	add("alone/no-mode", gpuPod(), optedIn("a"))
	add("alone/mode-none", gpuPod(contract.AnnotationMode, "none"), optedIn("a", contract.AnnotationMode, "rdma-shared"))
	add("alone/namespace-mode-no-gpu", launcher, optedIn("a", contract.AnnotationMode, "rdma-shared"))
	add("alone/bad-namespace-socket-fallback-no-mode", gpuPod(), optedIn("a", contract.AnnotationSocketFallback, "x"))

	// webhook/mutate TestMutateRefusals
	always := corev1.ContainerRestartPolicyAlways
	refusable := &corev1.Pod{Spec: corev1.PodSpec{
		Containers:     []corev1.Container{{Name: "train", Image: "x", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}}}},
		InitContainers: []corev1.Container{{Name: "prep", Image: "x"}, {Name: "agent", Image: "x", RestartPolicy: &always}},
	}}
	m, e, c, pr, sf, iw, ml := contract.AnnotationMode, contract.AnnotationHCAs, contract.AnnotationContainers, contract.AnnotationProfile, contract.AnnotationSocketFallback, contract.AnnotationIdleWarning, contract.AnnotationMemlock
	for _, r := range []struct {
		name string
		kv   []string
		ns   mutate.Namespace
	}{
		{"unknown-mode", []string{m, "rdma"}, optedIn("t")},
		{"shared-and-exclusive", []string{m, "rdma-shared,rdma-exclusive"}, optedIn("t")},
		{"none-combined", []string{m, "none,ipoib"}, optedIn("t")},
		{"bad-namespace-mode", nil, optedIn("team", m, "fast")},
		{"hcas-not-a-number", []string{m, "rdma-exclusive", e, "eight"}, optedIn("t")},
		{"hcas-zero", []string{m, "rdma-exclusive", e, "0"}, optedIn("t")},
		{"hcas-too-many", []string{m, "rdma-exclusive", e, "65"}, optedIn("t")},
		{"hcas-padded", []string{m, "rdma-exclusive", e, " +08 "}, optedIn("t")},
		{"unknown-container", []string{m, "rdma-shared", c, "train,trainer"}, optedIn("t")},
		{"empty-container-entry", []string{m, "rdma-shared", c, "train,"}, optedIn("t")},
		{"sidecar-named", []string{m, "rdma-shared", c, "agent, train"}, optedIn("t")},
		{"unknown-profile", []string{m, "rdma-shared", pr, "ndv6"}, optedIn("t")},
		{"unknown-namespace-profile", []string{m, "rdma-shared"}, optedIn("team", pr, "nd")},
		{"typo-under-prefix", []string{m, "rdma-shared", contract.Prefix + "hca", "8"}, optedIn("t")},
		{"inject-label-as-annotation", []string{contract.Prefix + "inject", "enabled"}, optedIn("t")},
		{"bad-memlock", []string{m, "rdma-shared", ml, "lots"}, optedIn("t")},
		{"fractional-memlock", []string{m, "rdma-shared", ml, "100m"}, optedIn("t")},
		{"overflowing-memlock", []string{m, "rdma-shared", ml, "1e99"}, optedIn("t")},
		{"user-memlock", []string{m, "rdma-shared", ml, " 64Gi"}, optedIn("t")},
		{"bad-memlock-without-mode", []string{ml, "lots"}, optedIn("t")},
		{"bad-memlock-mode-none", []string{m, "none", ml, "-1"}, optedIn("t", m, "rdma-shared")},
		{"bad-socket-fallback", []string{m, "rdma-shared", sf, "never"}, optedIn("t")},
		{"bad-socket-fallback-mode-none", []string{m, "none", sf, "Deny"}, optedIn("t")},
		{"bad-rdma-idle-warning", []string{m, "rdma-shared", iw, "off"}, optedIn("t")},
		{"rdma-idle-warning-off", []string{m, "rdma-shared", iw, "false"}, optedIn("t")},
		{"bad-placement", []string{m, "rdma-exclusive", contract.AnnotationPlacement, "same-rack"}, optedIn("t")},
		{"bad-placement-mode-none", []string{m, "none", contract.AnnotationPlacement, "Any"}, optedIn("t")},
		{"placement-any", []string{m, "rdma-exclusive", contract.AnnotationPlacement, "any"}, optedIn("t")},
		{"bad-namespace-socket-fallback", []string{m, "rdma-shared"}, optedIn("team", sf, "no")},
		{"namespace-fail-closed", []string{m, "rdma-exclusive"}, optedIn("team", sf, "deny")},
		{"malformed-csv-networks", []string{m, "ipoib", "k8s.v1.cni.cncf.io/networks", "a,,b"}, optedIn("t")},
		{"exclusive-too-many-gpus-per-hca", []string{m, "rdma-exclusive", pr, "oci-h100-roce"}, optedIn("t")},
	} {
		add("refusal/"+r.name, withAnnos(refusable, r.kv...), r.ns)
	}
	// Where CEL cannot do what the Go core does (docs/admission-policy.md,
	// "Known differences"); KnownDifferences names the results that differ.
	add("difference/malformed-json-networks", withAnnos(refusable, m, "ipoib", "k8s.v1.cni.cncf.io/networks", `[{"name":`), optedIn("t"))
	add("difference/interface-taken", withAnnos(refusable, m, "ipoib", "k8s.v1.cni.cncf.io/networks", "other@ib0"), optedIn("t"))
	huge := refusable.DeepCopy()
	huge.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"] = resource.MustParse("40")
	add("refusal/exclusive-40-gpus-2-per-gpu", withAnnos(huge, m, "rdma-exclusive", pr, "oci-h100-roce"), optedIn("t"))
	boundsCases(add, refusable)
	return cases, nil
}

// Difference is how a case's policy result differs from the webhook's.
type Difference struct {
	Why string
	// APIServerOnly: the policies compute the webhook's result, but the API
	// server's order of admission steps shows another (validation runs
	// before validating policies, after mutating webhooks).
	APIServerOnly bool
}

// KnownDifferences are the cases whose policy result differs from the
// webhook's; each is a row of docs/admission-policy.md's table.
var KnownDifferences = knownDifferences()

func knownDifferences() map[string]Difference {
	d := map[string]Difference{
		// CEL has no JSON parser: the JSON form of the Multus annotation is read
		// with patterns that follow its structure; a value they cannot follow
		// is refused in the policy's words.
		"difference/malformed-json-networks/default":      {Why: "malformed JSON networks annotation: both refuse, the webhook with its JSON decoder's words"},
		"difference/malformed-json-networks/never+ifname": {Why: "malformed JSON networks annotation: both refuse, the webhook with its JSON decoder's words"},
		// The IPoIB interface name (ipoib.interface) already taken by another
		// network: the webhook refuses, the policy appends (Multus fails the
		// sandbox on the duplicate name).
		"difference/interface-taken/never+ifname": {Why: "webhook refuses an IPoIB interface name taken by another network; policy appends the network"},
		// A negative GPU count: the webhook refuses with its own message; with
		// the policies the API server's validation refuses the pod first.
		"fuzz-seed/negative-gpus/default":                      {Why: "a negative GPU count is refused by the API server's validation, before the policy's message", APIServerOnly: true},
		"fuzz-seed/negative-gpus/never+ifname":                 {Why: "a negative GPU count is refused by the API server's validation, before the policy's message", APIServerOnly: true},
		"bounds/annotation-468KB/default":                      {Why: "annotations over the API server's 256 KiB are refused by its validation, which runs after the mutating policy (stopped at its size guard) and before the validating policy's message", APIServerOnly: true},
		"bounds/annotation-468KB/never+ifname":                 {Why: "annotations over the API server's 256 KiB are refused by its validation, which runs after the mutating policy (stopped at its size guard) and before the validating policy's message", APIServerOnly: true},
		"bounds/networks-468KB/default":                        {Why: "annotations over the API server's 256 KiB are refused by its validation, which runs after the mutating policy (stopped at its size guard) and before the validating policy's message", APIServerOnly: true},
		"bounds/networks-468KB/never+ifname":                   {Why: "annotations over the API server's 256 KiB are refused by its validation, which runs after the mutating policy (stopped at its size guard) and before the validating policy's message", APIServerOnly: true},
		"difference/networks-json-object/default":              {Why: "a JSON networks value that is no list: both refuse, the webhook with its JSON decoder's words"},
		"difference/networks-json-object/never+ifname":         {Why: "a JSON networks value that is no list: both refuse, the webhook with its JSON decoder's words"},
		"difference/networks-json-string-element/default":      {Why: "a JSON networks element that is no object: both refuse, the webhook naming the entry"},
		"difference/networks-json-string-element/never+ifname": {Why: "a JSON networks element that is no object: both refuse, the webhook naming the entry"},
		"difference/escape-private-use/default":                {Why: "a private-use character in a refused value: the webhook escapes it, the policy repeats it"},
		"difference/escape-private-use/never+ifname":           {Why: "a private-use character in a refused value: the webhook escapes it, the policy repeats it"},
		"difference/memlock-fraction-over-8Ei/default":         {Why: "a fractional memlock of 8Ei or more: the webhook says not whole, the policy too large"},
		"difference/memlock-fraction-over-8Ei/never+ifname":    {Why: "a fractional memlock of 8Ei or more: the webhook says not whole, the policy too large"},
	}
	// inBoth lists a case under both configurations the corpus runs.
	inBoth := func(name string, diff Difference) {
		for _, cfg := range []string{"default", "never+ifname"} {
			d[name+"/"+cfg] = diff
		}
	}
	for _, v := range gpuCountsValidationFirst() {
		inBoth("gpus/limit-"+v, Difference{Why: "a negative or fractional GPU count the webhook refuses is refused by the API server's validation, before the policy's message", APIServerOnly: true})
	}
	for name := range JSONRefusals {
		inBoth("difference/json-"+name, Difference{Why: "a well-formed JSON networks value the webhook's decoder refuses: both refuse, the policy in its own words"})
	}
	return d
}

// mutateCopy is pod as the core stores it in ns under the default
// configuration (nil when the core refuses or leaves it alone).
func mutateCopy(pod *corev1.Pod, ns mutate.Namespace) (*corev1.Pod, error) {
	p := pod.DeepCopy()
	p.Namespace = ns.Name
	res, err := mutate.Mutate(p, ns, Configs()["default"])
	if err != nil || !res.Injected {
		return nil, err
	}
	return p, nil
}
