//go:build integration

package templates

import (
	"context"
	"sync"
	"testing"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/internal/testing/golden"
	"github.com/ibkube/ibkube/internal/testing/testenv"
	"github.com/ibkube/ibkube/webhook/config"
	"github.com/ibkube/ibkube/webhook/mutate"
)

// TestControllerOnTheAPIServer runs the controller's passes against a real
// kube-apiserver (envtest): labelling a namespace brings every kept
// template, a second pass and a second replica change nothing (the API
// server's defaults do not make a template look different), a pod the
// webhook's mutation aligns passes the API server's validation and names a
// template that exists, and unlabelling the namespace or turning the
// feature off removes them.
func TestControllerOnTheAPIServer(t *testing.T) {
	rest, _ := testenv.Start(t, "envtest-assets")
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, resourceapi.AddToScheme, metav1.AddMetaToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	cl, err := client.New(rest, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	cfg := on()
	ctrl := &Controller{Namespaces: cl, Templates: cl, Config: func() *config.Config { return cfg }, Log: testr.New(t)}
	team := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team", Labels: map[string]string{contract.LabelInject: contract.InjectEnabled}}}
	for _, ns := range []*corev1.Namespace{team, {ObjectMeta: metav1.ObjectMeta{Name: "plain"}}} {
		if err := cl.Create(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}

	reconcile(ctx, t, ctrl)
	wantNames := sets.New[string]()
	for _, s := range mutate.AlignedShapes(cfg) {
		wantNames.Insert(s.Name())
	}
	if got := names(ctx, t, cl, "team"); !got.Equal(wantNames) {
		t.Fatalf("team holds %v, want %v", sets.List(got), sets.List(wantNames))
	}
	if got := names(ctx, t, cl, "plain"); got.Len() != 0 {
		t.Fatalf("plain, not opted in, holds %v", sets.List(got))
	}
	assertSettled(ctx, t, cl, cfg, "team")

	// Two replicas at once: each write the other makes first is no error.
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { reconcile(ctx, t, ctrl) })
	}
	wg.Wait()
	assertSettled(ctx, t, cl, cfg, "team")

	// The webhook's mutation, in process, then the API server's own
	// validation of the pod (dry run): the claim names a kept template.
	pod := alignedPod(t)
	if _, err := mutate.Mutate(pod, mutate.Namespace{Name: "team", Labels: team.Labels}, cfg); err != nil {
		t.Fatal(err)
	}
	if len(pod.Spec.ResourceClaims) != 1 {
		t.Fatalf("mutated pod's resourceClaims = %v, want the aligned claim", pod.Spec.ResourceClaims)
	}
	if err := cl.Create(ctx, pod, client.DryRunAll); err != nil {
		t.Fatalf("API server refuses the aligned pod: %v", err)
	}
	var tmpl resourceapi.ResourceClaimTemplate
	if err := cl.Get(ctx, client.ObjectKey{Namespace: "team", Name: *pod.Spec.ResourceClaims[0].ResourceClaimTemplateName}, &tmpl); err != nil {
		t.Fatalf("the pod's template: %v", err)
	}

	team.Labels = nil
	if err := cl.Update(ctx, team); err != nil {
		t.Fatal(err)
	}
	reconcile(ctx, t, ctrl)
	if got := names(ctx, t, cl, "team"); got.Len() != 0 {
		t.Fatalf("team, no longer opted in, holds %v", sets.List(got))
	}

	team.Labels = map[string]string{contract.LabelInject: contract.InjectEnabled}
	if err := cl.Update(ctx, team); err != nil {
		t.Fatal(err)
	}
	reconcile(ctx, t, ctrl)
	cfg = config.Default()
	reconcile(ctx, t, ctrl)
	if got := names(ctx, t, cl, "team"); got.Len() != 0 {
		t.Fatalf("alignedClaims off, team holds %v", sets.List(got))
	}
}

func reconcile(ctx context.Context, t *testing.T, c *Controller) {
	t.Helper()
	if err := c.Reconcile(ctx); err != nil {
		t.Errorf("Reconcile: %v", err)
	}
}

func names(ctx context.Context, t *testing.T, cl client.Client, ns string) sets.Set[string] {
	t.Helper()
	var l resourceapi.ResourceClaimTemplateList
	if err := cl.List(ctx, &l, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	out := sets.New[string]()
	for _, tm := range l.Items {
		out.Insert(tm.Name)
	}
	return out
}

// assertSettled fails unless a pass over what the API server holds now
// would write nothing.
func assertSettled(ctx context.Context, t *testing.T, cl client.Client, cfg *config.Config, ns string) {
	t.Helper()
	var l resourceapi.ResourceClaimTemplateList
	if err := cl.List(ctx, &l, client.MatchingLabels{LabelManagedBy: Manager}); err != nil {
		t.Fatal(err)
	}
	existing := make([]*resourceapi.ResourceClaimTemplate, len(l.Items))
	for i := range l.Items {
		existing[i] = &l.Items[i]
	}
	plan, err := Plan(cfg, []string{ns}, existing)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) != 0 {
		t.Errorf("a pass over the API server's templates would write %v", summary(plan))
	}
}

func alignedPod(t *testing.T) *corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	golden.ReadYAML(t, "../mutate/testdata/pods/aligned-ndv5-4gpu.yaml", &pod)
	pod.Namespace = "team"
	return &pod
}
