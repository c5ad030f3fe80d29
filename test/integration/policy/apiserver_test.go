//go:build integration

package policy

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/internal/testing/corpus"
	"github.com/ibkube/ibkube/internal/testing/policytest"
	"github.com/ibkube/ibkube/internal/testing/testenv"
	"github.com/ibkube/ibkube/webhook/mutate"
	"github.com/ibkube/ibkube/webhook/policy"
)

// TestAPIServerEquivalence installs the chart's policy mode into a real
// kube-apiserver 1.37 and admits webhook/mutate's whole corpus through it
// (dry-run creates), under each configuration of the corpus. Every pod the
// Go core admits must come back identical (both sent through the same API
// server defaulting), and every refusal must carry the core's message,
// except for the cases listed in corpus.KnownDifferences, which must still
// differ. The second configuration is reached by re-applying only the
// parameter ConfigMap: a changed setting needs no policy edit.
func TestAPIServerEquivalence(t *testing.T) {
	// The chart's defaults, but for the memlock it takes from the node
	// agent's NRI cap: the corpus's default configuration is the binary's.
	ctx, cs := policyCluster(t, 10*time.Minute, "webhook.config.memlock=unlimited")
	cases, err := corpus.Load("../../..")
	if err != nil {
		t.Fatal(err)
	}
	configs := corpus.Configs()
	n := 0
	for _, cfgName := range []string{"default", "never+ifname"} {
		cfg := configs[cfgName]
		if cfgName != "default" {
			params, err := policy.Params(cfg)
			if err != nil {
				t.Fatal(err)
			}
			params["version"] = chartAppVersion(t)
			cm, err := cs.CoreV1().ConfigMaps(namespace).Get(ctx, release+"-admission-params", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			cm.Data = params
			if _, err := cs.CoreV1().ConfigMaps(namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		waitForParams(ctx, t, cs, cfg.CapabilityPolicy == "never")
		for _, tc := range cases {
			if tc.Config != cfgName {
				continue
			}
			n++
			t.Run(tc.Name, func(t *testing.T) {
				compare(ctx, t, cs, tc, n)
			})
		}
	}
}

// policyCluster starts a kube-apiserver, installs the chart in policy mode
// into namespace (helm --set values added to admission.mode=policy) and
// makes the opted-in namespace "probe" that waitForParams admits through.
// The context ends with the test or after within.
func policyCluster(t *testing.T, within time.Duration, set ...string) (context.Context, *kubernetes.Clientset) {
	t.Helper()
	rest, _ := testenv.Start(t, "test-integration-policy")
	cs := testenv.Clientset(t, rest)
	ctx, cancel := context.WithTimeout(context.Background(), within)
	t.Cleanup(cancel)
	mkNS(ctx, t, cs, namespace, nil, nil)
	args := []string{"--set", "admission.mode=policy"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	install(ctx, t, cs, decode(t, helmTemplate(t, args...)))
	mkNS(ctx, t, cs, "probe", map[string]string{contract.LabelInject: contract.InjectEnabled}, nil)
	return ctx, cs
}

// compare admits tc through the Go core and through the API server.
func compare(ctx context.Context, t *testing.T, cs kubernetes.Interface, tc corpus.Case, n int) {
	// A namespace of its own per case: the policies read its labels and
	// annotations from the API server's cache, and a name is never reused
	// with other metadata. The core sees the same name.
	ns := tc.NS
	ns.Name = fmt.Sprintf("%.50s-%03d", ns.Name, n)
	mkNS(ctx, t, cs, ns.Name, ns.Labels, ns.Annotations)
	// The reference namespace: the same labels (Pod Security applies to
	// both) but the opt-in one, so no policy applies there.
	ref := ns.Name + "-ref"
	refLabels := map[string]string{}
	for k, v := range ns.Labels {
		if k != contract.LabelInject {
			refLabels[k] = v
		}
	}
	mkNS(ctx, t, cs, ref, refLabels, nil)

	pod := tc.Pod.DeepCopy()
	pod.Namespace = ns.Name
	// envtest runs no controller creating the default service account.
	pod.Spec.AutomountServiceAccountToken = ptr.To(false)
	want := pod.DeepCopy()
	_, merr := mutate.Mutate(want, ns, corpus.Configs()[tc.Config])

	start := time.Now()
	got, perr := cs.CoreV1().Pods(ns.Name).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if strings.HasPrefix(tc.Name, "bounds/") {
		// The work bounds' cases: how long the API server took, for
		// docs/admission-policy.md.
		t.Logf("%s: answered through the policies in %s", tc.Name, time.Since(start).Round(time.Millisecond))
	}
	var refusal *mutate.Refusal
	var wantPod *corev1.Pod
	var werr error
	if !errors.As(merr, &refusal) {
		if merr != nil {
			t.Fatalf("Mutate: %v", merr)
		}
		// The core's pod, through the same defaulting and validation, in a
		// namespace no policy applies to.
		w := want.DeepCopy()
		w.Namespace = ref
		wantPod, werr = cs.CoreV1().Pods(ref).Create(ctx, w, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	}
	same := false
	switch {
	case refusal != nil:
		same = perr != nil && apierrors.IsForbidden(perr) && strings.HasSuffix(perr.Error(), "denied request: "+refusal.Msg)
		if !same && !isKnown(tc) {
			t.Errorf("refusal\n     core: %s\n   policy: %v", refusal.Msg, perr)
		}
	case werr != nil:
		same = perr != nil && strings.ReplaceAll(werr.Error(), ref, ns.Name) == perr.Error()
		if !same && !isKnown(tc) {
			t.Errorf("the core's pod is refused by the API server (%v) but the policy's gives %v", werr, perr)
		}
	case perr != nil:
		if !isKnown(tc) {
			t.Errorf("the core admits the pod; the policy refuses it: %v", perr)
		}
	default:
		w, g := normalize(t, wantPod), normalize(t, got)
		diff := cmp.Diff(w, g)
		same = diff == ""
		if !same && !isKnown(tc) {
			t.Errorf("admitted pod differs (-core +policy):\n%s", diff)
		}
	}
	if d, ok := corpus.KnownDifferences[tc.Name]; ok && same {
		t.Errorf("listed as a known difference (%s) but the API server gives the core's result: remove it from corpus.KnownDifferences and docs/admission-policy.md", d.Why)
	}
}

func isKnown(tc corpus.Case) bool {
	_, ok := corpus.KnownDifferences[tc.Name]
	return ok
}

var versionField = regexp.MustCompile(`; version=[^;]*$`)

// normalize drops what differs by construction: the namespace, the fields
// the API server fills per request, and the version in the injected
// annotation (the binary's for the core, the chart's appVersion for the
// policies).
func normalize(t *testing.T, p *corev1.Pod) map[string]any {
	t.Helper()
	p = p.DeepCopy()
	p.Namespace, p.UID, p.CreationTimestamp, p.ManagedFields, p.ResourceVersion, p.Generation = "", "", metav1.Time{}, nil, "", 0
	if v, ok := p.Annotations[contract.AnnotationInjected]; ok {
		p.Annotations[contract.AnnotationInjected] = versionField.ReplaceAllString(v, "; version=V")
	}
	return policytest.AsJSON(t, p)
}

func mkNS(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string, labels, annos map[string]string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annos}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// install creates the rendered policy objects with typed clients.
func install(ctx context.Context, t *testing.T, cs kubernetes.Interface, objs map[string]*unstructured.Unstructured) {
	t.Helper()
	var found int
	for _, u := range objs {
		if u.GetLabels()["app.kubernetes.io/component"] == "node-agent" {
			// The node agent's own policies (its Node's labels) hold the
			// agent, not pods: test/chart checks them.
			continue
		}
		var err error
		ar := cs.AdmissionregistrationV1()
		switch u.GetKind() {
		case "ConfigMap":
			if u.GetName() != release+"-admission-params" {
				continue
			}
			err = create[corev1.ConfigMap](ctx, cs.CoreV1().ConfigMaps(namespace), u)
		case "MutatingAdmissionPolicy":
			err = create[admissionregistrationv1.MutatingAdmissionPolicy](ctx, ar.MutatingAdmissionPolicies(), u)
		case "MutatingAdmissionPolicyBinding":
			err = create[admissionregistrationv1.MutatingAdmissionPolicyBinding](ctx, ar.MutatingAdmissionPolicyBindings(), u)
		case "ValidatingAdmissionPolicy":
			err = create[admissionregistrationv1.ValidatingAdmissionPolicy](ctx, ar.ValidatingAdmissionPolicies(), u)
		case "ValidatingAdmissionPolicyBinding":
			err = create[admissionregistrationv1.ValidatingAdmissionPolicyBinding](ctx, ar.ValidatingAdmissionPolicyBindings(), u)
		default:
			continue
		}
		if err != nil {
			t.Fatalf("create %s %s: %v", u.GetKind(), u.GetName(), err)
		}
		found++
	}
	if found != 5 {
		t.Fatalf("installed %d policy objects from the chart, want 5 (parameters, 2 policies, 2 bindings)", found)
	}
}

// creator is the Create method every typed client of kind T has.
type creator[T any] interface {
	Create(ctx context.Context, obj *T, opts metav1.CreateOptions) (*T, error)
}

// create converts u into its typed object and creates that with c.
func create[T any](ctx context.Context, c creator[T], u *unstructured.Unstructured) error {
	var o T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &o); err != nil {
		return fmt.Errorf("convert into %T: %w", o, err)
	}
	_, err := c.Create(ctx, &o, metav1.CreateOptions{})
	return err
}

// waitForParams waits until the API server admits with the policies and
// the parameters last written: a probe pod gets IPC_LOCK unless never.
// Policies, bindings and parameters reach the admission plugin through
// informers, so the first requests after a write may not see them.
func waitForParams(ctx context.Context, t *testing.T, cs kubernetes.Interface, never bool) {
	t.Helper()
	probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe", Annotations: map[string]string{contract.AnnotationMode: "rdma-shared"}},
		Spec: corev1.PodSpec{AutomountServiceAccountToken: ptr.To(false), Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
	deadline := time.Now().Add(2 * time.Minute)
	var last string
	for time.Now().Before(deadline) {
		got, err := cs.CoreV1().Pods("probe").Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			_, injected := got.Annotations[contract.AnnotationInjected]
			hasCap := got.Spec.Containers[0].SecurityContext != nil && got.Spec.Containers[0].SecurityContext.Capabilities != nil
			if injected && hasCap != never {
				return
			}
			last = fmt.Sprintf("injected=%t IPC_LOCK=%t", injected, hasCap)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	t.Fatalf("the policies did not take effect within 2m (capability policy never=%t): last probe %s", never, last)
}
