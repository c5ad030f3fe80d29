//go:build integration

package chart

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/ibkube/ibkube/internal/testing/testenv"
)

// startAPIServer runs envtest's kube-apiserver and etcd (KUBEBUILDER_ASSETS)
// with the CRDs the optional templates need: stand-ins for cert-manager and
// the Prometheus operator, and the real NetworkAttachmentDefinition CRD as
// the NAD client module ships it.
func startAPIServer(t *testing.T) *rest.Config {
	t.Helper()
	cfg, _ := startEnv(t, filepath.Join("testdata", "crds"), testenv.NADCRD(t))
	return cfg
}

// startEnv runs envtest with the CRDs in crdDirs (none: a cluster without
// Multus, cert-manager or the Prometheus operator).
func startEnv(t *testing.T, crdDirs ...string) (*rest.Config, *envtest.Environment) {
	t.Helper()
	return testenv.Start(t, "test-integration-chart", crdDirs...)
}

// cluster holds the clients the tests apply rendered objects with.
type cluster struct {
	cs     *kubernetes.Clientset
	dyn    dynamic.Interface
	mapper meta.RESTMapper
}

func newCluster(t *testing.T, cfg *rest.Config) *cluster {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cs, dyn := testenv.Clients(t, cfg)
	return &cluster{cs: cs, dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}
}

// apply server-side applies obj as fieldManager, taking over conflicting
// fields as kubectl apply --server-side --force-conflicts does; with dryRun
// the API server validates and admits it without storing anything.
func (c *cluster) apply(ctx context.Context, obj *unstructured.Unstructured, fieldManager string, dryRun bool) error {
	gvk := obj.GroupVersionKind()
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return fmt.Errorf("the API server does not serve this kind: %w", err)
	}
	data, err := obj.MarshalJSON()
	if err != nil {
		return err
	}
	var ri dynamic.ResourceInterface = c.dyn.Resource(m.Resource)
	if m.Scope.Name() == "namespace" {
		ri = c.dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
	}
	opts := metav1.PatchOptions{FieldManager: fieldManager, Force: ptr.To(true)}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err = ri.Patch(ctx, obj.GetName(), "application/apply-patch+yaml", data, opts)
	return err
}

// shippedManifests is manifests/ibkube.yaml, the render users install.
func shippedManifests(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../manifests/ibkube.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// installedWithNodes starts an API server, installs manifests/ibkube.yaml
// and creates the named Nodes, each with labels; the context ends after
// three minutes or with the test.
func installedWithNodes(t *testing.T, labels map[string]string, nodes ...string) (*rest.Config, *cluster, context.Context) {
	t.Helper()
	cfg := startAPIServer(t)
	c := newCluster(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	c.installManifests(ctx, t)
	for _, name := range nodes {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
		if _, err := c.cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return cfg, c, ctx
}

// installManifests applies every object of manifests/ibkube.yaml for real,
// as kubectl would.
func (c *cluster) installManifests(ctx context.Context, t *testing.T) {
	t.Helper()
	for _, obj := range decodeAll(t, shippedManifests(t)) {
		if err := c.apply(ctx, obj, "kubectl", false); err != nil {
			t.Fatalf("apply %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
}

// TestAPIServer validates every render (manifests/ibkube.yaml and each golden
// case) against the real API server: a server-side apply with dryRun=All runs
// schema validation, defaulting, CEL compilation of matchConditions and every
// validating admission step, without storing anything.
func TestAPIServer(t *testing.T) {
	c := newCluster(t, startAPIServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// Namespaced objects can only be dry-run into a namespace that exists;
	// "monitoring" is Grafana's, where the observability case puts the dashboard.
	for _, ns := range []string{namespace, "monitoring"} {
		if _, err := c.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	manifests := shippedManifests(t)
	renders := map[string]string{"manifests/ibkube.yaml": manifests}
	for _, c := range renderCases {
		out, err := render(t, c.args()...)
		if err != nil {
			t.Fatal(err)
		}
		renders["render "+c.name] = out
	}

	dryRun := func(obj *unstructured.Unstructured) error {
		return c.apply(ctx, obj, "ibkube-chart-test", true)
	}

	for name, stream := range renders {
		t.Run(name, func(t *testing.T) {
			objs := decodeAll(t, stream)
			if len(objs) == 0 {
				t.Fatal("render has no objects")
			}
			for _, obj := range objs {
				if err := dryRun(obj); err != nil {
					t.Errorf("%s %s/%s rejected by the API server: %v", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
				}
			}
		})
	}

	// The check can fail: the same objects, broken the way a template edit
	// could break them, are refused.
	t.Run("broken objects are refused", func(t *testing.T) {
		for _, tc := range []struct {
			kind  string
			path  []string
			value any
			want  string
		}{
			{"MutatingWebhookConfiguration", nil, "object.metadata.annotations.exists(k, k.startsWith(1))", "matchConditions"},
			{"Deployment", []string{"spec", "template", "spec", "securityContext", "seccompProfile", "type"}, "Hardened", "seccompProfile"},
			{"DaemonSet", []string{"spec", "template", "spec", "priorityClassName"}, "Not_A_Name", "priorityClassName"},
		} {
			var obj *unstructured.Unstructured
			for _, o := range decodeAll(t, manifests) {
				if o.GetKind() == tc.kind {
					obj = o
				}
			}
			if obj == nil {
				t.Fatalf("manifests have no %s", tc.kind)
			}
			if tc.path == nil { // replace the CEL expression
				hooks, _, _ := unstructured.NestedSlice(obj.Object, "webhooks")
				hook := hooks[0].(map[string]any)
				conds := hook["matchConditions"].([]any)
				conds[0].(map[string]any)["expression"] = tc.value
				if err := unstructured.SetNestedSlice(obj.Object, hooks, "webhooks"); err != nil {
					t.Fatal(err)
				}
			} else if err := unstructured.SetNestedField(obj.Object, tc.value, tc.path...); err != nil {
				t.Fatal(err)
			}
			err := dryRun(obj)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("broken %s: dry-run error %v, want one about %s", tc.kind, err, tc.want)
			}
		}
	})
}

// TestAPIServerWebhookSelection installs the MutatingWebhookConfiguration
// from manifests/ibkube.yaml as shipped, with no webhook behind its Service:
// with failurePolicy Fail, every pod the API server sends to the webhook is
// refused and every pod it does not send is created. That shows which pods
// the namespaceSelector and the matchConditions select.
func TestAPIServerWebhookSelection(t *testing.T) {
	c := newCluster(t, startAPIServer(t))
	cs, dyn := c.cs, c.dyn
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	var mwc *unstructured.Unstructured
	for _, o := range decodeAll(t, shippedManifests(t)) {
		if o.GetKind() == "MutatingWebhookConfiguration" {
			mwc = o
		}
	}
	if mwc == nil {
		t.Fatal("manifests/ibkube.yaml has no MutatingWebhookConfiguration")
	}

	optedIn := map[string]string{"infiniband.azure.com/inject": "enabled"}
	for name, labels := range map[string]map[string]string{
		"opted-in": optedIn,
		"plain":    nil,
		namespace:  optedIn, // the add-on's own namespace, labelled by mistake
	} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// kube-system exists in envtest; label it as a careless user might.
	kubeSystem, err := cs.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kubeSystem.Labels["infiniband.azure.com/inject"] = "enabled"
	if _, err := cs.CoreV1().Namespaces().Update(ctx, kubeSystem, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	mwcRes := dyn.Resource(admissionGVR)
	if _, err := mwcRes.Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("install the shipped MutatingWebhookConfiguration: %v", err)
	}

	gpu := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}
	pod := func(annotations map[string]string, limits corev1.ResourceList, initLimits corev1.ResourceList) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "p-", Annotations: annotations},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "main", Image: "busybox", Resources: corev1.ResourceRequirements{Limits: limits},
			}}},
		}
		if initLimits != nil {
			p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox", Resources: corev1.ResourceRequirements{Limits: initLimits}}}
		}
		return p
	}
	mode := map[string]string{"infiniband.azure.com/mode": "rdma-shared"}
	cases := []struct {
		name     string
		ns       string
		pod      *corev1.Pod
		wantSent bool
	}{
		{"annotated pod in opted-in namespace", "opted-in", pod(mode, nil, nil), true},
		{"GPU pod without annotation", "opted-in", pod(nil, gpu, nil), true},
		{"GPU only in an init container", "opted-in", pod(nil, nil, gpu), true},
		{"unknown key under the prefix (typo must reach the webhook to be refused)", "opted-in", pod(map[string]string{"infiniband.azure.com/mdoe": "x"}, nil, nil), true},
		{"plain pod", "opted-in", pod(nil, nil, nil), false},
		{"pod with other annotations and CPU limits", "opted-in", pod(map[string]string{"example.com/x": "y"}, corev1.ResourceList{"cpu": resource.MustParse("1")}, nil), false},
		{"annotated pod in a namespace that did not opt in", "plain", pod(mode, gpu, nil), false},
		{"annotated pod in the add-on's namespace", namespace, pod(mode, gpu, nil), false},
		{"annotated pod in kube-system", "kube-system", pod(mode, gpu, nil), false},
	}
	// The API server's webhook client learns about the new configuration
	// asynchronously; wait until the first selected pod is refused.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := cs.CoreV1().Pods("opted-in").Create(ctx, pod(mode, nil, nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the webhook configuration never took effect")
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cs.CoreV1().Pods(tc.ns).Create(ctx, tc.pod, metav1.CreateOptions{})
			sent := err != nil && strings.Contains(err.Error(), "pods.infiniband.azure.com")
			if err != nil && !sent {
				t.Fatalf("create failed for another reason: %v", err)
			}
			if sent != tc.wantSent {
				t.Errorf("sent to the webhook = %v, want %v (err: %v)", sent, tc.wantSent, err)
			}
			if sent && !apierrors.IsInternalError(err) && !strings.Contains(err.Error(), "failed calling webhook") {
				t.Errorf("unexpected refusal: %v", err)
			}
		})
	}
}

var admissionGVR = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"}
