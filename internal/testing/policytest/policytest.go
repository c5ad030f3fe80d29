// Package policytest runs ibkube's rendered admission policies in process
// with the API server's own CEL compiler, environment, cost accounting and
// JSON patcher (k8s.io/apiserver admission/plugin/policy/mutating), so a
// CEL mistake shows up in a unit test and a policy's cost can be measured
// where no API server runs; test/integration/policy runs the same policies
// in a real kube-apiserver. Only tests import it.
package policytest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/webhook/mutate"
	"github.com/ibkube/ibkube/webhook/policy"
)

// Server evaluates one rendered set of policies.
type Server struct {
	objs     *policy.Objects
	mc, vc   *plugincel.CompositedCompiler
	mutator  plugincel.MutatingEvaluator
	refusal  plugincel.ConditionEvaluator
	compiled []error
}

// New compiles objs; compile errors are returned by every Admit.
func New(objs *policy.Objects) (*Server, error) {
	opts := plugincel.OptionalVariableDeclarations{HasParams: true, HasAuthorizer: true}
	s := &Server{objs: objs}
	compile := func(vars []admissionregistrationv1.Variable) (*plugincel.CompositedCompiler, error) {
		c, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
		if err != nil {
			return nil, err
		}
		for _, v := range vars {
			if r := c.CompileAndStoreVariable(&validating.Variable{Name: v.Name, Expression: v.Expression}, opts, environment.StoredExpressions); r.Error != nil {
				s.compiled = append(s.compiled, fmt.Errorf("variable %s: %w", v.Name, r.Error))
			}
		}
		return c, nil
	}
	mc, err := compile(objs.Mutating.Spec.Variables)
	if err != nil {
		return nil, err
	}
	s.mc = mc
	popts := opts
	popts.HasPatchTypes = true
	s.mutator = mc.CompileMutatingEvaluator(&patch.JSONPatchCondition{Expression: objs.Mutating.Spec.Mutations[0].JSONPatch.Expression}, popts, environment.StoredExpressions)
	vc, err := compile(objs.Validating.Spec.Variables)
	if err != nil {
		return nil, err
	}
	s.vc = vc
	s.refusal = vc.CompileCondition([]plugincel.ExpressionAccessor{&validating.MessageExpressionCondition{MessageExpression: objs.Validating.Spec.Validations[0].MessageExpression}}, opts, environment.StoredExpressions)
	s.compiled = append(append(s.compiled, s.mutator.CompilationErrors()...), s.refusal.CompilationErrors()...)
	return s, nil
}

// Admitted is what the policies made of a pod.
type Admitted struct {
	// Pod is the mutated pod (nil when refused).
	Pod *corev1.Pod
	// Refusal is the validating policy's message ("" when admitted).
	Refusal string
	// MutateCost and RefuseCost are the CEL cost of the mutation and of the
	// refusal check, in the units of the API server's budgets
	// (k8s.io/apiserver/pkg/apis/cel PerCallLimit, RuntimeCELCostBudget).
	MutateCost, RefuseCost int64
}

var podGVK = schema.GroupVersionKind{Version: "v1", Kind: "Pod"}

// Admit runs pod, created in ns, through the mutating policy and then the
// validating one, as the API server does.
func (s *Server) Admit(ctx context.Context, pod *corev1.Pod, ns mutate.Namespace) (Admitted, error) {
	if len(s.compiled) > 0 {
		return Admitted{}, fmt.Errorf("compile: %v", s.compiled)
	}
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns.Name, Labels: ns.Labels, Annotations: ns.Annotations}}
	pod = pod.DeepCopy()
	pod.Namespace = ns.Name
	attrs := func(p *corev1.Pod) *admission.VersionedAttributes {
		a := admission.NewAttributesRecord(p, nil, podGVK, ns.Name, p.Name, corev1.SchemeGroupVersion.WithResource("pods"), "",
			admission.Create, &metav1.CreateOptions{}, false, &user.DefaultInfo{Name: "test"})
		return &admission.VersionedAttributes{Attributes: a, VersionedKind: podGVK, VersionedObject: admission.NewLazyObject(p)}
	}
	vars := plugincel.OptionalVariableBindings{VersionedParams: s.objs.Params}
	gvr := metav1.GroupVersionResource{Version: "v1", Resource: "pods"}
	req := func(va *admission.VersionedAttributes) *admissionv1.AdmissionRequest {
		return plugincel.CreateAdmissionRequest(va.Attributes, gvr, metav1.GroupVersionKind{Version: "v1", Kind: "Pod"})
	}
	va := attrs(pod)
	// The dispatcher evaluates each variable once per policy invocation
	// through a composition context; without one, variables are missing.
	_, left, err := s.mutator.ForInput(s.mc.CreateContext(ctx), va, req(va), vars, nsObj, celconfig.RuntimeCELCostBudget)
	if err != nil {
		return Admitted{}, fmt.Errorf("mutating policy: %s", shorten(err))
	}
	out := Admitted{MutateCost: celconfig.RuntimeCELCostBudget - left}
	patched, err := patch.NewJSONPatcher(s.mutator).Patch(s.mc.CreateContext(ctx), patch.Request{
		MatchedResource:     corev1.SchemeGroupVersion.WithResource("pods"),
		VersionedAttributes: va,
		ObjectInterfaces:    admission.NewObjectInterfacesFromScheme(scheme.Scheme),
		OptionalVariables:   vars,
		Namespace:           nsObj,
	}, celconfig.RuntimeCELCostBudget)
	if err != nil {
		return Admitted{}, fmt.Errorf("mutating policy: %s", shorten(err))
	}
	got, ok := patched.(*corev1.Pod)
	if !ok {
		return Admitted{}, fmt.Errorf("patched object is %T", patched)
	}
	// The validating policy sees the pod as mutated, as in the API server.
	vb := attrs(got)
	res, left, err := s.refusal.ForInput(ctx, vb, req(vb), vars, nsObj, celconfig.RuntimeCELCostBudget)
	if err != nil {
		return Admitted{}, fmt.Errorf("validating policy: %s", shorten(err))
	}
	out.RefuseCost = celconfig.RuntimeCELCostBudget - left
	if res[0].Error != nil {
		return Admitted{}, fmt.Errorf("validating policy: %s", shorten(res[0].Error))
	}
	msg, _ := res[0].EvalResult.Value().(string)
	if msg != "" {
		out.Refusal = msg
		return out, nil
	}
	out.Pod = got
	return out, nil
}

// shorten drops the expression text the API server repeats in a CEL error.
func shorten(err error) string {
	s := err.Error()
	if _, after, ok := strings.Cut(s, "' resulted in error: "); ok {
		return "resulted in error: " + after
	}
	return s
}

// WidePod is the heaviest pod the policies see often: 16 GPU containers
// with env and mounts of their own, rdma-exclusive with IPoIB and a
// profile with whole-node values and env.
func WidePod(n int) *corev1.Pod {
	p := &corev1.Pod{}
	p.Name = "wide"
	p.Annotations = map[string]string{
		contract.AnnotationMode: "rdma-exclusive,ipoib", contract.AnnotationProfile: "ndv5",
		"k8s.v1.cni.cncf.io/networks": "storage/storage-net@stor0",
	}
	for i := 0; i < n; i++ {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{
			Name: fmt.Sprintf("rank-%02d", i), Image: "nvcr.io/nvidia/pytorch:24.07-py3",
			Env:          []corev1.EnvVar{{Name: "RANK", Value: fmt.Sprint(i)}, {Name: "WORLD_SIZE", Value: fmt.Sprint(n)}},
			VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
			Resources:    corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}},
		})
	}
	return p
}

// AsJSON is v as the API server stores it: JSON, where an empty map and a
// missing one are the same and quantities are in canonical form.
func AsJSON(t testing.TB, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// VariableCost is the CEL cost of one of the policies' variables for one
// pod: what evaluating it adds once the variables before it are known.
type VariableCost struct {
	Name string
	Cost int64
}

// VariableCosts is the cost of each variable of the policies for pod,
// created in ns, in their order: the API server evaluates a variable once
// per policy, when an expression first reads it, and charges its cost to
// that policy. Each figure is the difference between reading the
// variables up to it and up to the one before it in one evaluation, so a
// variable's figure leaves out the variables it reads and the units of
// the expression that reads it (measured on a constant and taken off).
func (s *Server) VariableCosts(ctx context.Context, pod *corev1.Pod, ns mutate.Namespace) ([]VariableCost, error) {
	if len(s.compiled) > 0 {
		return nil, fmt.Errorf("compile: %v", s.compiled)
	}
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns.Name, Labels: ns.Labels, Annotations: ns.Annotations}}
	pod = pod.DeepCopy()
	pod.Namespace = ns.Name
	a := admission.NewAttributesRecord(pod, nil, podGVK, ns.Name, pod.Name, corev1.SchemeGroupVersion.WithResource("pods"), "",
		admission.Create, &metav1.CreateOptions{}, false, &user.DefaultInfo{Name: "test"})
	va := &admission.VersionedAttributes{Attributes: a, VersionedKind: podGVK, VersionedObject: admission.NewLazyObject(pod)}
	req := plugincel.CreateAdmissionRequest(a, metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, metav1.GroupVersionKind{Version: "v1", Kind: "Pod"})
	vars := plugincel.OptionalVariableBindings{VersionedParams: s.objs.Params}
	opts := plugincel.OptionalVariableDeclarations{HasParams: true, HasAuthorizer: true}
	cost := func(c *plugincel.CompositedCompiler, reads []plugincel.ExpressionAccessor) (int64, error) {
		ev := c.CompileCondition(reads, opts, environment.StoredExpressions)
		if errs := ev.CompilationErrors(); len(errs) > 0 {
			return 0, fmt.Errorf("compile: %v", errs)
		}
		_, left, err := ev.ForInput(ctx, va, req, vars, nsObj, celconfig.RuntimeCELCostBudget)
		if err != nil {
			return 0, fmt.Errorf("evaluate: %s", shorten(err))
		}
		return celconfig.RuntimeCELCostBudget - left, nil
	}
	read, err := cost(s.mc, []plugincel.ExpressionAccessor{&validating.ValidationCondition{Expression: "[params].size() == 1"}})
	if err != nil {
		return nil, err
	}
	// Each policy declares only the variables it reads: the mutating
	// policy's are measured with its compiler, then the validating
	// policy's own with the validating one.
	var out []VariableCost
	seen := map[string]bool{}
	for _, p := range []struct {
		c    *plugincel.CompositedCompiler
		vars []admissionregistrationv1.Variable
	}{{s.mc, s.objs.Mutating.Spec.Variables}, {s.vc, s.objs.Validating.Spec.Variables}} {
		var reads []plugincel.ExpressionAccessor
		var before int64
		for _, v := range p.vars {
			reads = append(reads, &validating.ValidationCondition{Expression: "[variables." + v.Name + "].size() == 1"})
			total, err := cost(p.c, reads)
			if err != nil {
				return nil, fmt.Errorf("variable %s: %w", v.Name, err)
			}
			if !seen[v.Name] {
				out = append(out, VariableCost{Name: v.Name, Cost: total - before - read})
			}
			seen[v.Name] = true
			before = total
		}
	}
	return out, nil
}
