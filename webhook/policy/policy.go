// Package policy renders ibkube's admission as native API server policies:
// a MutatingAdmissionPolicy doing what webhook/mutate does, a
// ValidatingAdmissionPolicy refusing what it refuses, their bindings, and
// the ConfigMap both read their settings from. The policies' CEL is fixed
// text; everything a site configures (resources, profiles, network) is in
// the ConfigMap, rendered from the same WebhookConfig the webhook reads, so
// changing a profile needs no policy edit. Nothing here does I/O.
package policy

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/internal/version"
	"github.com/ibkube/ibkube/nccl"
	"github.com/ibkube/ibkube/webhook/config"
	"github.com/ibkube/ibkube/webhook/multus"
)

// Names says what the rendered objects are called and where they apply.
type Names struct {
	// Prefix starts every object name (the Helm release's full name).
	Prefix string
	// Namespace holds the parameter ConfigMap (the release namespace).
	Namespace string
	// ExcludeNamespaces are never admitted through the policies, besides
	// Namespace and kube-system (as for the webhook).
	ExcludeNamespaces []string
	// Selector replaces the opt-in namespace selector (a test or benchmark
	// binding the policies beside a running webhook); nil: namespaces
	// labelled for injection, as the webhook selects them.
	Selector *metav1.LabelSelector
	// Version goes into the injected annotation, as the webhook writes its
	// own version there ("": this binary's version).
	Version string
}

// Mutating is the MutatingAdmissionPolicy's name (and its binding's).
func (n Names) Mutating() string { return n.Prefix + "-inject" }

// Validating is the ValidatingAdmissionPolicy's name (and its binding's).
func (n Names) Validating() string { return n.Prefix + "-refuse" }

// Params is the parameter ConfigMap's name.
func (n Names) Params() string { return n.Prefix + "-admission-params" }

// Objects are the rendered objects, in the order to apply them.
type Objects struct {
	Params            *corev1.ConfigMap
	Mutating          *admissionregistrationv1.MutatingAdmissionPolicy
	MutatingBinding   *admissionregistrationv1.MutatingAdmissionPolicyBinding
	Validating        *admissionregistrationv1.ValidatingAdmissionPolicy
	ValidatingBinding *admissionregistrationv1.ValidatingAdmissionPolicyBinding
}

// longestSuffix is the longest of the suffixes the object names add to
// Prefix (Params).
const longestSuffix = len("-admission-params")

// NameError is a Names field the API server would refuse; Field is the
// field's name in Names.
type NameError struct {
	Field string
	Err   error
}

func (e *NameError) Error() string { return e.Err.Error() }
func (e *NameError) Unwrap() error { return e.Err }

// Validate refuses names the API server would refuse on one object but not
// another: applied as one stream, a bad binding would leave the policies
// installed and bound to nothing, so no pod would be admitted through them.
func (n Names) Validate() error {
	if errs := validation.IsDNS1123Label(n.Namespace); len(errs) > 0 {
		return &NameError{"Namespace", fmt.Errorf("release namespace %q: %s; accepted: a namespace name (a lower-case DNS label of at most 63 characters)",
			n.Namespace, strings.Join(errs, "; "))}
	}
	errs := validation.IsDNS1123Subdomain(n.Prefix)
	max := validation.DNS1123SubdomainMaxLength - longestSuffix
	if len(errs) == 0 && len(n.Prefix) > max {
		errs = []string{fmt.Sprintf("%d characters", len(n.Prefix))}
	}
	if len(errs) > 0 {
		return &NameError{"Prefix", fmt.Errorf("prefix %q: %s; accepted: the start of an object name (lower-case letters, digits, '-' and '.', "+
			"beginning and ending with a letter or digit, at most %d characters)", n.Prefix, strings.Join(errs, "; "), max)}
	}
	for i, ns := range n.ExcludeNamespaces {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return &NameError{"ExcludeNamespaces", fmt.Errorf("excluded namespace %d %q: %s; accepted: namespace names (lower-case DNS labels of at most 63 characters)",
				i+1, ns, strings.Join(errs, "; "))}
		}
	}
	return nil
}

// ErrAlignedClaims refuses a config with alignedClaims on: the aligned
// claim is made from ResourceClaimTemplates the webhook's controller keeps
// in each opted-in namespace, and a policy has no controller, so its pods
// keep their extended resources.
var ErrAlignedClaims = errors.New("alignedClaims.enabled: admission.mode policy cannot give pods the aligned GPU+HCA claim " +
	"(its ResourceClaimTemplates are kept by the webhook's controller) and keeps GPUs and HCAs on extended resources; " +
	"accepted: alignedClaims.enabled false with the policy, or admission.mode webhook for aligned claims (docs/admission-policy.md)")

// Render renders the policies and their parameters for cfg; a config
// with alignedClaims on is refused (ErrAlignedClaims).
func Render(cfg *config.Config, n Names) (*Objects, error) {
	if err := n.Validate(); err != nil {
		return nil, fmt.Errorf("policy names: %w", err)
	}
	if cfg.AlignedClaims.Enabled {
		return nil, ErrAlignedClaims
	}
	data, err := Params(cfg)
	if err != nil {
		return nil, err
	}
	if n.Version != "" {
		data["version"] = n.Version
	}
	return &Objects{
		Params: &corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: n.Params(), Namespace: n.Namespace},
			Data:       data,
		},
		Mutating:          MutatingPolicy(n.Mutating()),
		MutatingBinding:   mutatingBinding(n),
		Validating:        ValidatingPolicy(n.Validating()),
		ValidatingBinding: validatingBinding(n),
	}, nil
}

// YAML renders objs as one multi-document stream.
func (o *Objects) YAML() ([]byte, error) {
	var b bytes.Buffer
	for i, obj := range []any{o.Params, o.Mutating, o.MutatingBinding, o.Validating, o.ValidatingBinding} {
		y, err := yaml.Marshal(obj)
		if err != nil {
			return nil, fmt.Errorf("marshal object %d: %w", i, err)
		}
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(y)
	}
	return b.Bytes(), nil
}

// podRules matches pod creation, what both policies admit; each policy
// gets its own copy.
func podRules() *admissionregistrationv1.MatchResources {
	return &admissionregistrationv1.MatchResources{
		ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
			RuleWithOperations: admissionregistrationv1.RuleWithOperations{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"},
					Scope: ptr.To(admissionregistrationv1.NamespacedScope),
				},
			},
		}},
	}
}

// typeMeta is the TypeMeta of the admissionregistration.k8s.io/v1 kind,
// which the rendered YAML needs and the typed objects leave empty.
func typeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: kind}
}

// celVariables are the variables that exprs read, and the variables those
// read, in their declared order. The API server builds an accessor for
// every declared variable on each evaluation (the policy's
// matchConditions, its patch or validation), read or not, so each policy
// declares only its own.
func celVariables(exprs ...string) []admissionregistrationv1.Variable {
	vs := variables()
	need := map[string]bool{}
	for _, e := range exprs {
		readsInto(need, e)
	}
	// A variable reads only variables declared before it: one pass from
	// the last to the first closes the set.
	for i := len(vs) - 1; i >= 0; i-- {
		if need[vs[i].name] {
			readsInto(need, vs[i].expr)
		}
	}
	var out []admissionregistrationv1.Variable
	for _, v := range vs {
		if need[v.name] {
			out = append(out, admissionregistrationv1.Variable{Name: v.name, Expression: v.expr})
		}
	}
	return out
}

// readsInto adds to need the variables expr reads: each name after
// "variables.".
func readsInto(need map[string]bool, expr string) {
	const ref = "variables."
	for i := strings.Index(expr, ref); i >= 0; i = strings.Index(expr, ref) {
		expr = expr[i+len(ref):]
		n := strings.IndexFunc(expr, func(r rune) bool { return r != '_' && !unicode.IsLetter(r) && !unicode.IsDigit(r) })
		if n < 0 {
			n = len(expr)
		}
		if n > 0 {
			need[expr[:n]] = true
		}
		expr = expr[n:]
	}
}

// mutatingVariables and validatingVariables are each policy's variables.
func mutatingVariables() []admissionregistrationv1.Variable { return celVariables(mutation()) }

func validatingVariables() []admissionregistrationv1.Variable {
	return celVariables(refusal, refusalMessage())
}

// refusalMessage is the validating policy's message: the refusal, bounded.
func refusalMessage() string { return bound("variables.refusal", maxMessage) }

// matchConditions keep the mutating policy from running for a pod over
// the annotation count's bound, which it would not change: the API server
// would still encode the pod, apply the empty patch and decode the result,
// which for a pod of 40,000 annotation keys took seconds. The condition is
// decided by lookups and a size. The validating policy has none: its
// refusal is decided by the same lookups first, and for every pod it must
// look at a condition would be one more evaluation (an activation and an
// accessor for each of its variables).
func matchConditions() []admissionregistrationv1.MatchCondition {
	return []admissionregistrationv1.MatchCondition{{Name: "ibkube-bounded", Expression: matchBounded()}}
}

func paramKind() *admissionregistrationv1.ParamKind {
	return &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
}

// MutatingPolicy is the injection policy; its text depends on nothing but
// its name.
func MutatingPolicy(name string) *admissionregistrationv1.MutatingAdmissionPolicy {
	return &admissionregistrationv1.MutatingAdmissionPolicy{
		TypeMeta:   typeMeta("MutatingAdmissionPolicy"),
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			ParamKind:        paramKind(),
			MatchConstraints: podRules(),
			MatchConditions:  matchConditions(),
			Variables:        mutatingVariables(),
			Mutations: []admissionregistrationv1.Mutation{{
				PatchType: admissionregistrationv1.PatchTypeJSONPatch,
				JSONPatch: &admissionregistrationv1.JSONPatch{Expression: mutation()},
			}},
			// As the webhook's default: no pod of an opted-in namespace
			// starts without RDMA because the policy could not run.
			FailurePolicy:      ptr.To(admissionregistrationv1.Fail),
			ReinvocationPolicy: admissionregistrationv1.IfNeededReinvocationPolicy,
		},
	}
}

// ValidatingPolicy refuses what mutate.Mutate refuses, with its message.
func ValidatingPolicy(name string) *admissionregistrationv1.ValidatingAdmissionPolicy {
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   typeMeta("ValidatingAdmissionPolicy"),
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			ParamKind:        paramKind(),
			MatchConstraints: podRules(),
			Variables:        validatingVariables(),
			Validations: []admissionregistrationv1.Validation{{
				Expression:        refusal,
				MessageExpression: refusalMessage(),
				Reason:            ptr.To(metav1.StatusReasonForbidden),
			}},
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
		},
	}
}

// namespaces selects opted-in namespaces, never the release namespace or
// kube-system: the webhook's namespaceSelector.
func namespaces(n Names) *metav1.LabelSelector {
	if n.Selector != nil {
		return n.Selector
	}
	return &metav1.LabelSelector{
		MatchLabels: map[string]string{contract.LabelInject: contract.InjectEnabled},
		MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn,
			Values: append([]string{n.Namespace, "kube-system"}, n.ExcludeNamespaces...),
		}},
	}
}

func paramRef(n Names) *admissionregistrationv1.ParamRef {
	return &admissionregistrationv1.ParamRef{
		Name: n.Params(), Namespace: n.Namespace,
		ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction),
	}
}

func mutatingBinding(n Names) *admissionregistrationv1.MutatingAdmissionPolicyBinding {
	return &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		TypeMeta:   typeMeta("MutatingAdmissionPolicyBinding"),
		ObjectMeta: metav1.ObjectMeta{Name: n.Mutating()},
		Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{
			PolicyName:     n.Mutating(),
			ParamRef:       paramRef(n),
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: namespaces(n)},
		},
	}
}

func validatingBinding(n Names) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   typeMeta("ValidatingAdmissionPolicyBinding"),
		ObjectMeta: metav1.ObjectMeta{Name: n.Validating()},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        n.Validating(),
			ParamRef:          paramRef(n),
			MatchResources:    &admissionregistrationv1.MatchResources{NamespaceSelector: namespaces(n)},
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
}

// Params is the parameter ConfigMap's data for cfg: the settings under
// their WebhookConfig names, and each resolved profile under
// profile.<name>.<field> (see ProfileParams).
func Params(cfg *config.Config) (map[string]string, error) {
	ipoib := multus.Network{Namespace: cfg.IPoIBNamespace(), Name: cfg.IPoIB.Name, Interface: cfg.IPoIB.Interface}
	ipoibJSON, err := ipoibElement(ipoib)
	if err != nil {
		return nil, err
	}
	d := map[string]string{
		"version":           version.Version,
		"gpuResource":       cfg.GPUResource,
		"sharedResource":    cfg.Resources.Shared,
		"exclusiveResource": cfg.Resources.Exclusive,
		"defaultHCAs":       strconv.Itoa(cfg.DefaultHCAs),
		"memlock":           cfg.Memlock,
		"capabilityPolicy":  string(cfg.CapabilityPolicy),
		"defaultProfile":    cfg.DefaultProfile,
		"profiles":          strings.Join(cfg.ProfileNames(), ", "),
		"ipoibName":         cfg.IPoIB.Name,
		"ipoibNamespace":    cfg.IPoIBNamespace(),
		"ipoibInterface":    cfg.IPoIB.Interface,
		"ipoibCSV":          ipoib.String(),
		"ipoibJSON":         ipoibJSON,
	}
	for _, name := range cfg.ProfileNames() {
		p, _ := cfg.Profile(name)
		for k, v := range ProfileParams(p) {
			d["profile."+name+"."+k] = v
		}
	}
	return d, nil
}

// ProfileParams is one profile's entries in the parameter ConfigMap, keyed
// by field: its env as NAME=VALUE lines, its numbers and resources, and its
// NCCL conf lines already rendered for every case a pod can be in
// (confKey): the policies only prepend the header and the lines ibkube
// writes first, where splitting and filtering the profile's lines for
// every pod was most of the mutation's CEL.
func ProfileParams(p nccl.Profile) map[string]string {
	var e strings.Builder
	for _, v := range p.Env {
		e.WriteString(v.Name + "=" + v.Value + "\n")
	}
	d := map[string]string{
		"env":               e.String(),
		"gpusPerNode":       strconv.Itoa(p.GPUsPerNode),
		"hcasPerGPU":        strconv.Itoa(p.HCAsPerGPU),
		"exclusiveResource": p.ExclusiveResource,
		"gpuResource":       p.GPUResource,
	}
	for _, first := range confFirstLines {
		for _, whole := range []bool{false, true} {
			d[confKey(first.key, whole)] = confLines(p, first.names, whole)
		}
	}
	return d
}

// confFirstLines are the sets of lines mutate's ncclConf writes before the
// profile's, by the mode and socket fallback (NCCL_IB_DISABLE for RDMA,
// NCCL_NET too when failing closed, NCCL_SOCKET_IFNAME for IPoIB alone),
// each under the key the CEL picks it by; the profile's lines of the same
// names are left out after them.
var confFirstLines = []struct {
	key   string
	names []string
}{
	{confRDMA, []string{"NCCL_IB_DISABLE"}},
	{confRDMAClosed, []string{"NCCL_IB_DISABLE", "NCCL_NET"}},
	{confIPoIB, []string{"NCCL_SOCKET_IFNAME"}},
	{confNone, nil},
}

const (
	confRDMA       = "rdma"
	confRDMAClosed = "rdma-closed"
	confIPoIB      = "ipoib"
	confNone       = "none"
	confPrefix     = "conf."
	confWhole      = ".whole"
	confPartial    = ".partial"
)

// confKey is the profile field holding the conf lines after first (a
// confFirstLines key) for a pod holding the whole machine or not.
func confKey(first string, whole bool) string {
	if whole {
		return confPrefix + first + confWhole
	}
	return confPrefix + first + confPartial
}

// confLines is the part of mutate's ncclConf after the header and the
// lines named in first: the profile's lines in order, once a name, the
// whole-node ones only for a whole-node pod, and the comment naming those
// left out.
func confLines(p nccl.Profile, first []string, whole bool) string {
	seen := make(map[string]bool, len(p.NCCL)+len(first))
	for _, n := range first {
		seen[n] = true
	}
	var b strings.Builder
	var skipped []string
	for _, v := range p.NCCL {
		switch {
		case v.WholeNode && !whole:
			if !seen[v.Name] {
				skipped = append(skipped, v.Name+" ("+v.Value+")")
			}
		case !seen[v.Name]:
			seen[v.Name] = true
			b.WriteString(v.Name + "=" + v.Value + "\n")
		}
	}
	if len(skipped) == 0 {
		return b.String()
	}
	if p.GPUsPerNode > 0 {
		b.WriteString("# Left out, as this pod does not hold all " + strconv.Itoa(p.GPUsPerNode) + " GPUs of the machine (GPU/HCA pairing unknown): ")
	} else {
		b.WriteString("# Left out, as the profile states no GPUs per machine (GPU/HCA pairing unknown): ")
	}
	b.WriteString(strings.Join(skipped, " ") + "\n")
	return b.String()
}

// ipoibElement is the network as multus.Merge appends it to a JSON-form
// annotation.
func ipoibElement(n multus.Network) (string, error) {
	v, _, err := multus.Merge("[]", []multus.Network{n}, "")
	if err != nil {
		return "", fmt.Errorf("ipoib network %s: %w", n, err)
	}
	return strings.TrimSuffix(strings.TrimPrefix(v, "["), "]"), nil
}

// chartData is what the chart copies from here: the policies' CEL and the
// built-in profiles' parameters. The chart fills in names and the site's
// settings from its values, as it does for the webhook's WebhookConfig.
type chartData struct {
	MutatingMatchConditions []admissionregistrationv1.MatchCondition `json:"mutatingMatchConditions"`
	MutatingVariables       []admissionregistrationv1.Variable       `json:"mutatingVariables"`
	ValidatingVariables     []admissionregistrationv1.Variable       `json:"validatingVariables"`
	Mutation                string                                   `json:"mutation"`
	Validation              admissionregistrationv1.Validation       `json:"validation"`
	Profiles                string                                   `json:"profiles"`
	ProfileParams           map[string]string                        `json:"profileParams"`
}

// ChartData renders charts/ibkube/files/admission-policy.yaml.
func ChartData() ([]byte, error) {
	cfg := config.Default()
	d := chartData{
		MutatingMatchConditions: matchConditions(),
		MutatingVariables:       mutatingVariables(),
		ValidatingVariables:     validatingVariables(),
		Mutation:                mutation(),
		Validation:              ValidatingPolicy("x").Spec.Validations[0],
		Profiles:                strings.Join(cfg.ProfileNames(), ", "),
		ProfileParams:           map[string]string{},
	}
	for _, name := range cfg.ProfileNames() {
		p, _ := cfg.Profile(name)
		for k, v := range ProfileParams(p) {
			d.ProfileParams["profile."+name+"."+k] = v
		}
	}
	y, err := yaml.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("marshal chart data: %w", err)
	}
	return append([]byte("# Generated by `make policy-chart` (ibkube policy --chart-data) from webhook/policy. DO NOT EDIT.\n"+
		"# The CEL of the admission policies and the built-in profiles' parameters; templates/admission-policy.yaml\n"+
		"# adds the names and the site's settings.\n"), y...), nil
}
