package mutate

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/webhook/config"
	"github.com/ibkube/ibkube/webhook/multus"
)

// checkProperties asserts, for one admission of orig, what every mutation
// must satisfy: the patch turns the original JSON into the mutated pod, a
// second Mutate changes nothing, and nothing the user wrote was removed or
// changed. It returns a description of the first violation.
func checkProperties(orig *corev1.Pod, ns Namespace, cfg *config.Config) error {
	origJSON, err := json.Marshal(orig)
	if err != nil {
		return err
	}
	pod := orig.DeepCopy()
	res, err := Mutate(pod, ns, cfg)
	if err != nil {
		if !reflect.DeepEqual(pod, orig) {
			return fmt.Errorf("refused (%v) but changed the pod", err)
		}
		return nil
	}
	mutJSON, err := json.Marshal(pod)
	if err != nil {
		return err
	}

	// 1. Patch(original JSON) == mutated pod.
	patched := origJSON
	if len(res.Patch) > 0 {
		pb, err := json.Marshal(res.Patch)
		if err != nil {
			return fmt.Errorf("marshal patch: %w", err)
		}
		p, err := jsonpatch.DecodePatch(pb)
		if err != nil {
			return fmt.Errorf("decode patch: %w", err)
		}
		if patched, err = p.Apply(origJSON); err != nil {
			return fmt.Errorf("apply patch %s: %w", pb, err)
		}
	}
	var got, want any
	if err := json.Unmarshal(patched, &got); err != nil {
		return err
	}
	if err := json.Unmarshal(mutJSON, &want); err != nil {
		return err
	}
	if diff := cmp.Diff(want, got); diff != "" {
		return fmt.Errorf("patched original differs from mutated pod (-mutated +patched):\n%s", diff)
	}

	// 2. Idempotence: mutating the mutated pod changes nothing.
	again := pod.DeepCopy()
	res2, err := Mutate(again, ns, cfg)
	if err != nil {
		return fmt.Errorf("second Mutate refused: %w", err)
	}
	if len(res2.Patch) != 0 {
		return fmt.Errorf("second Mutate patched: %+v", res2.Patch)
	}
	if diff := cmp.Diff(pod, again); diff != "" {
		return fmt.Errorf("second Mutate changed the pod:\n%s", diff)
	}

	// 3. Nothing the user wrote is removed or changed.
	userJSON, err := json.Marshal(withoutMovedResources(orig, pod, cfg))
	if err != nil {
		return err
	}
	var o any
	if err := json.Unmarshal(userJSON, &o); err != nil {
		return err
	}
	if err := contained("", o, want); err != nil {
		return err
	}
	return nil
}

// contained checks that every value in orig is in mut at the same place;
// lists may only grow at the end, maps only gain keys. The Multus networks
// annotation may gain entries after the user's.
func contained(path string, orig, mut any) error {
	switch o := orig.(type) {
	case map[string]any:
		m, ok := mut.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: was an object, now %T", path, mut)
		}
		for k, ov := range o {
			mv, ok := m[k]
			if !ok {
				return fmt.Errorf("%s/%s: removed", path, k)
			}
			if path == "/metadata/annotations" && k == multus.Annotation {
				if err := networksKept(ov.(string), mv.(string)); err != nil {
					return fmt.Errorf("%s/%s: %w", path, k, err)
				}
				continue
			}
			if err := contained(path+"/"+escape(k), ov, mv); err != nil {
				return err
			}
		}
	case []any:
		m, ok := mut.([]any)
		if !ok || len(m) < len(o) {
			return fmt.Errorf("%s: list shrank or changed type", path)
		}
		for i := range o {
			if err := contained(fmt.Sprintf("%s/%d", path, i), o[i], m[i]); err != nil {
				return err
			}
		}
	default:
		if !reflect.DeepEqual(orig, mut) {
			return fmt.Errorf("%s: changed from %v to %v", path, orig, mut)
		}
	}
	return nil
}

func networksKept(orig, mut string) error {
	o, err := multus.Parse(orig, "ns")
	if err != nil {
		return nil // a malformed value is refused, never rewritten
	}
	m, err := multus.Parse(mut, "ns")
	if err != nil {
		return fmt.Errorf("mutated value unparsable: %w", err)
	}
	// A value with no network in it (empty, blanks) parses to nil: nothing
	// to keep, whatever the mutation appended.
	if len(m) < len(o) || (len(o) > 0 && !reflect.DeepEqual(o, m[:len(o)])) {
		return fmt.Errorf("user's networks %v not kept in %v", o, m)
	}
	return nil
}

func TestPropertiesGoldenCorpus(t *testing.T) {
	t.Parallel()
	cfgs := map[string]*config.Config{"default": testConfig()}
	never := testConfig()
	never.CapabilityPolicy = config.CapabilityNever
	never.IPoIB.Interface = "ib0"
	cfgs["never+ifname"] = never
	// Every corpus pod of an rdma-exclusive GPU container is admitted with
	// an aligned claim here.
	cfgs["aligned"] = alignedConfig()
	for _, tc := range goldenCases {
		for cn, cfg := range cfgs {
			t.Run(tc.name+"/"+cn, func(t *testing.T) {
				t.Parallel()
				if err := checkProperties(readPod(t, tc.name), tc.ns, cfg); err != nil {
					t.Error(err)
				}
			})
		}
	}
}

// TestPatchOnEmptyObjects covers the "add the whole missing object" paths:
// a pod with no annotations, resources, security context, env, mounts or
// volumes at all.
func TestPatchOnEmptyObjects(t *testing.T) {
	t.Parallel()
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}, {Name: "b", SecurityContext: &corev1.SecurityContext{}}}}}
	pod.Namespace = "x"
	for _, mode := range []string{"rdma-shared,ipoib", "rdma-exclusive", "ipoib"} {
		p := pod.DeepCopy()
		p.Annotations = map[string]string{contract.AnnotationMode: mode}
		if err := checkProperties(p, optedIn("x"), testConfig()); err != nil {
			t.Errorf("%s: %v", mode, err)
		}
		p.Annotations = nil
		if err := checkProperties(p, optedIn("x", contract.AnnotationMode, mode), testConfig()); err != nil {
			t.Errorf("namespace mode %s: %v", mode, err)
		}
	}
}

// FuzzMutate feeds arbitrary pod JSON plus arbitrary values for the
// annotations the core parses (empty: leave the pod's own) and checks the
// properties above: no panic, the patch reproduces the mutation, a second
// admission changes nothing, nothing the user wrote changes.
func FuzzMutate(f *testing.F) {
	for _, tc := range goldenCases {
		f.Add(mustJSON(f, readPod(f, tc.name)), tc.ns.Annotations[contract.AnnotationMode], tc.ns.Labels[LabelPodSecurityEnforce], "", "", "", "")
	}
	seed := mustJSON(f, readPod(f, "multi-container"))
	f.Add(seed, "", "", "rdma-exclusive,ipoib", "3", "warmup,data-cache", `[{"name":"a"}]`)
	f.Add(seed, "", "restricted", "ipoib", "", "metrics", "x/y@net1, z")
	f.Add([]byte(`{"metadata":{"annotations":{"infiniband.azure.com/mode":"ipoib","k8s.v1.cni.cncf.io/networks":"a,b@net1"}},"spec":{"containers":[{"name":"a","env":[{"name":"NCCL_CONF_FILE","value":"/x"}]}]}}`), "", "", "", "", "", "")
	f.Add([]byte(`{"metadata":{"annotations":{"infiniband.azure.com/profile":"oci-h100-roce","infiniband.azure.com/socket-fallback":"deny"}},"spec":{"containers":[{"name":"a","resources":{"limits":{"nvidia.com/gpu":"-8"}}},{"name":"b","securityContext":{"privileged":true}}]}}`), "", "", "rdma-exclusive", "", "", "")
	f.Add([]byte(`{"metadata":{"annotations":{"infiniband.azure.com/profile":"ndv5-mi300x"}},"spec":{"containers":[{"name":"a","resources":{"limits":{"amd.com/gpu":"4"}},"volumeMounts":[{"name":"d","mountPath":"/dev/infiniband"}]}],"volumes":[{"name":"d","hostPath":{"path":"/dev"}}]}}`), "rdma-exclusive", "", "", "", "", "")
	cfg := testConfig()
	f.Fuzz(func(t *testing.T, podJSON []byte, nsMode, psa, mode, hcas, containers, networks string) {
		var pod corev1.Pod
		if err := json.Unmarshal(podJSON, &pod); err != nil {
			t.Skip()
		}
		for k, v := range map[string]string{contract.AnnotationMode: mode, contract.AnnotationHCAs: hcas, contract.AnnotationContainers: containers, multus.Annotation: networks} {
			if v == "" {
				continue
			}
			if pod.Annotations == nil {
				pod.Annotations = map[string]string{}
			}
			pod.Annotations[k] = v
		}
		ns := optedIn("fuzz")
		if nsMode != "" {
			ns.Annotations[contract.AnnotationMode] = nsMode
		}
		if psa != "" {
			ns.Labels[LabelPodSecurityEnforce] = psa
		}
		if err := checkProperties(&pod, ns, cfg); err != nil {
			t.Fatal(err)
		}
	})
}

// withoutMovedResources is orig without the GPU and RDMA extended
// resources that an aligned claim took over in mutated: the one thing of
// the user's an admission removes, because the claim now serves it.
func withoutMovedResources(orig, mutated *corev1.Pod, cfg *config.Config) *corev1.Pod {
	out := orig.DeepCopy()
	moved := []corev1.ResourceName{corev1.ResourceName(cfg.GPUResource), corev1.ResourceName(cfg.Resources.Exclusive)}
	for _, name := range cfg.ProfileNames() {
		p, _ := cfg.Profile(name)
		moved = append(moved, corev1.ResourceName(p.GPUResource), corev1.ResourceName(p.ExclusiveResource))
	}
	strip := func(cs, ms []corev1.Container) {
		for i := range cs {
			if i >= len(ms) || !holdsAlignedClaim(&ms[i]) || holdsAlignedClaim(&cs[i]) {
				continue
			}
			for _, r := range moved {
				delete(cs[i].Resources.Limits, r)
				delete(cs[i].Resources.Requests, r)
			}
		}
	}
	strip(out.Spec.Containers, mutated.Spec.Containers)
	strip(out.Spec.InitContainers, mutated.Spec.InitContainers)
	return out
}
