// Package config is the admission webhook's configuration: one versioned YAML
// document (apiVersion ibkube.io/v1alpha1, kind WebhookConfig), parsed
// strictly and validated with errors that name the field.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/internal/memlockvalue"
	"github.com/ibkube/ibkube/nccl"
)

// APIVersion and Kind identify the file format.
const (
	APIVersion = "ibkube.io/v1alpha1"
	Kind       = "WebhookConfig"
)

// CapabilityPolicy says when selected containers get CAP_IPC_LOCK.
type CapabilityPolicy string

const (
	// CapabilityAuto adds IPC_LOCK unless the namespace enforces the
	// baseline or restricted Pod Security level, which would reject the pod.
	CapabilityAuto CapabilityPolicy = "auto"
	// CapabilityAlways adds IPC_LOCK regardless of Pod Security.
	CapabilityAlways CapabilityPolicy = "always"
	// CapabilityNever never adds IPC_LOCK (memlock comes from the node agent).
	CapabilityNever CapabilityPolicy = "never"
)

// Config is the webhook configuration.
type Config struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`

	// Resources are the extended resource names the device plugin advertises.
	Resources Resources `json:"resources"`
	// GPUResource is the resource that marks a GPU container
	// (default nvidia.com/gpu).
	GPUResource string `json:"gpuResource"`
	// DefaultHCAs is the rdma-exclusive count for a selected container that
	// requests no GPUs and has no hcas annotation.
	DefaultHCAs int `json:"defaultHCAs"`
	// IPoIB is the Multus network added for the ipoib mode.
	IPoIB IPoIBNetwork `json:"ipoib"`
	// Memlock is the value of the infiniband.azure.com/memlock annotation the
	// node agent enforces: "unlimited" or a quantity such as 64Gi.
	Memlock string `json:"memlock"`
	// CapabilityPolicy is auto, always or never (see CapabilityPolicy).
	CapabilityPolicy CapabilityPolicy `json:"capabilityPolicy"`
	// DefaultProfile applies when neither the pod nor its namespace names one.
	DefaultProfile string `json:"defaultProfile"`
	// Profiles are user-defined profiles. One with a built-in's name
	// overrides that built-in variable by variable; Base makes a new profile
	// start from another one.
	Profiles []ProfileSpec `json:"profiles,omitempty"`
	// AlignedClaims turns rdma-exclusive GPU pods' extended resources into
	// one DRA claim that keeps each GPU's HCAs beside it (docs/dra.md,
	// "Aligned GPU and HCA pairs"). Off by default.
	AlignedClaims AlignedClaims `json:"alignedClaims"`

	// ReleaseNamespace is where ibkube runs (the webhook's --namespace), the
	// default namespace of the IPoIB network. Not read from the file.
	ReleaseNamespace string `json:"-"`

	resolved map[string]nccl.Profile
}

// Resources names the RDMA extended resources.
type Resources struct {
	// Shared is the shared-mode resource, one per selected container.
	Shared string `json:"shared"`
	// Exclusive is the exclusive-mode resource, one per HCA.
	Exclusive string `json:"exclusive"`
}

// AlignedClaims is the aligned GPU+HCA claim's switch and the GPU driver's
// DeviceClass. Turning it on is a statement that the cluster's GPU nodes
// run DRA for both GPUs and HCAs: a pod given the claim can only run where
// both drivers publish ResourceSlices.
type AlignedClaims struct {
	Enabled bool `json:"enabled"`
	// GPUDeviceClass is the GPU driver's DeviceClass (gpu.nvidia.com).
	GPUDeviceClass string `json:"gpuDeviceClass"`
}

// IPoIBNetwork is a NetworkAttachmentDefinition reference.
type IPoIBNetwork struct {
	// Namespace of the NAD; empty means ReleaseNamespace (and if that is
	// empty too, the pod's own namespace).
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// Interface is the interface name inside the pod; empty lets Multus
	// name it (net1, net2, ... in list order).
	Interface string `json:"interface,omitempty"`
}

// ProfileSpec is a profile as written in the config file.
type ProfileSpec struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Base is a profile (built-in or defined earlier in the list) this one
	// starts from.
	Base string `json:"base,omitempty"`
	// NCCL are NCCL_* variables for the NCCL conf file.
	NCCL map[string]string `json:"nccl,omitempty"`
	// Env are other variables added as container env.
	Env map[string]string `json:"env,omitempty"`
	// WholeNodeNCCL are NCCL_* variables written only for pods whose GPU
	// containers hold all GPUsPerNode GPUs of the machine (such as
	// NCCL_NET_GDR_LEVEL=SYS, right only where every GPU has its HCA beside
	// it). A value under nccl applies to every pod.
	WholeNodeNCCL map[string]string `json:"wholeNodeNCCL,omitempty"`
	// RemovedTopologyFile is read only to refuse it with a message that
	// says where the topology comes from: the webhook never used it.
	RemovedTopologyFile string `json:"topologyFile,omitempty"`
	// GPUsPerNode is the machine's GPU count (0: unknown; whole-node values
	// are then never written).
	GPUsPerNode *int `json:"gpusPerNode,omitempty"`
	// HCAsPerGPU is the rdma-exclusive count per GPU when the pod has no
	// hcas annotation (0 or unset: 1).
	HCAsPerGPU *int `json:"hcasPerGPU,omitempty"`
	// ExclusiveResource replaces resources.exclusive for pods of this
	// profile (a RoCE pool such as rdma/roce); "" keeps the base's.
	ExclusiveResource string `json:"exclusiveResource,omitempty"`
	// GPUResource replaces gpuResource for pods of this profile (amd.com/gpu).
	GPUResource string `json:"gpuResource,omitempty"`
}

// Default returns the built-in configuration.
func Default() *Config {
	c := &Config{
		APIVersion:       APIVersion,
		Kind:             Kind,
		Resources:        Resources{Shared: contract.ResourceSharedIB, Exclusive: contract.ResourceExclusiveIB},
		GPUResource:      contract.ResourceGPU,
		DefaultHCAs:      1,
		IPoIB:            IPoIBNetwork{Name: contract.IPoIBNetwork},
		Memlock:          contract.DefaultMemlock,
		CapabilityPolicy: CapabilityAuto,
		DefaultProfile:   nccl.GenericIB,
		AlignedClaims:    AlignedClaims{GPUDeviceClass: contract.DefaultGPUDeviceClass},
	}
	if err := c.resolve(); err != nil {
		panic(fmt.Sprintf("built-in config invalid: %v", err)) // a programming error, covered by tests
	}
	return c
}

// Parse reads a WebhookConfig document. Fields not in the file keep their
// defaults; unknown fields are refused.
func Parse(data []byte) (*Config, error) {
	c := Default()
	c.resolved = nil
	c.APIVersion, c.Kind = "", ""
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("config is empty: want a WebhookConfig document (apiVersion: ibkube.io/v1alpha1, kind: WebhookConfig)")
	}
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("parse webhook config: %w", err)
	}
	strict, err := sigsjson.UnmarshalStrict(j, c, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return nil, fmt.Errorf("parse webhook config: %w", err)
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("parse webhook config: %w (accepted fields are listed in README.md, \"Webhook configuration\")", errors.Join(strict...))
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	if err := c.resolve(); err != nil {
		return nil, err
	}
	return c, nil
}

// Profile returns the resolved profile with that name.
func (c *Config) Profile(name string) (nccl.Profile, bool) {
	p, ok := c.resolved[name]
	return p, ok
}

// ProfileNames returns every profile name, sorted.
func (c *Config) ProfileNames() []string {
	return slices.Sorted(maps.Keys(c.resolved))
}

// IPoIBNamespace is the namespace of the IPoIB network as a pod's network
// selection names it: "" leaves it to the pod's own namespace.
func (c *Config) IPoIBNamespace() string { return c.IPoIBNamespaceFor("") }

// IPoIBNamespaceFor is the namespace of the IPoIB network a pod in
// podNamespace joins.
func (c *Config) IPoIBNamespaceFor(podNamespace string) string {
	return contract.IPoIBNamespace(c.IPoIB.Namespace, c.ReleaseNamespace, podNamespace)
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// problems collects validation errors, each naming the field, the bad value
// and what is accepted.
type problems []error

func (p *problems) bad(field, value, want string) {
	*p = append(*p, fmt.Errorf("%s: invalid value %q: %s", field, value, want))
}

// validate checks every field, reporting every problem at once in field
// order.
func (c *Config) validate() error {
	var p problems
	c.validateHeader(&p)
	c.validateResources(&p)
	c.validateIPoIB(&p)
	c.validatePolicies(&p)
	c.validateAlignedClaims(&p)
	seen := map[string]bool{}
	for i, s := range c.Profiles {
		s.validate(&p, fmt.Sprintf("profiles[%d]", i), seen, c.Resources.Shared)
	}
	return errors.Join(p...)
}

func (c *Config) validateHeader(p *problems) {
	if c.APIVersion != APIVersion {
		p.bad("apiVersion", c.APIVersion, "want "+APIVersion)
	}
	if c.Kind != Kind {
		p.bad("kind", c.Kind, "want "+Kind)
	}
}

// isExtendedResource says whether v is an extended resource name
// (domain/name).
func isExtendedResource(v string) bool {
	return len(validation.IsQualifiedName(v)) == 0 && strings.Contains(v, "/")
}

func (c *Config) validateResources(p *problems) {
	for _, f := range [...]struct{ field, v string }{
		{"resources.shared", c.Resources.Shared},
		{"resources.exclusive", c.Resources.Exclusive},
		{"gpuResource", c.GPUResource},
	} {
		if !isExtendedResource(f.v) {
			p.bad(f.field, f.v, "want an extended resource name such as rdma/shared_ib (domain/name)")
		}
	}
	if c.Resources.Shared == c.Resources.Exclusive {
		p.bad("resources.exclusive", c.Resources.Exclusive, "must differ from resources.shared")
	}
	if c.DefaultHCAs < 1 || c.DefaultHCAs > MaxHCAs {
		p.bad("defaultHCAs", fmt.Sprint(c.DefaultHCAs), fmt.Sprintf("want an integer from 1 to %d", MaxHCAs))
	}
}

func (c *Config) validateIPoIB(p *problems) {
	if msgs := validation.IsDNS1123Label(c.IPoIB.Name); len(msgs) > 0 {
		p.bad("ipoib.name", c.IPoIB.Name, "want a NetworkAttachmentDefinition name (DNS-1123 label)")
	}
	if c.IPoIB.Namespace != "" {
		if msgs := validation.IsDNS1123Label(c.IPoIB.Namespace); len(msgs) > 0 {
			p.bad("ipoib.namespace", c.IPoIB.Namespace, "want a namespace name (DNS-1123 label) or empty for the release namespace")
		}
	}
	if c.IPoIB.Interface != "" && (len(c.IPoIB.Interface) > 15 || strings.ContainsAny(c.IPoIB.Interface, "/ @,\"")) {
		p.bad("ipoib.interface", c.IPoIB.Interface, "want a Linux interface name (at most 15 characters, no '/', ' ', '@', ',')")
	}
}

func (c *Config) validatePolicies(p *problems) {
	if err := ValidateMemlock(c.Memlock); err != nil {
		p.bad("memlock", c.Memlock, err.Error())
	}
	switch c.CapabilityPolicy {
	case CapabilityAuto, CapabilityAlways, CapabilityNever:
	default:
		p.bad("capabilityPolicy", string(c.CapabilityPolicy), "want auto, always or never")
	}
}

func (c *Config) validateAlignedClaims(p *problems) {
	if msgs := validation.IsDNS1123Subdomain(c.AlignedClaims.GPUDeviceClass); len(msgs) > 0 {
		p.bad("alignedClaims.gpuDeviceClass", c.AlignedClaims.GPUDeviceClass,
			"want the GPU driver's DeviceClass name (a DNS-1123 subdomain such as "+contract.DefaultGPUDeviceClass+")")
	}
}

// validate checks one profile written as field f; seen holds the names of
// the profiles before it, shared the config's shared resource.
func (s ProfileSpec) validate(p *problems, f string, seen map[string]bool, shared string) {
	if msgs := validation.IsDNS1123Label(s.Name); len(msgs) > 0 {
		p.bad(f+".name", s.Name, "want a DNS-1123 label such as my-cluster")
	}
	if seen[s.Name] {
		p.bad(f+".name", s.Name, "profile defined twice")
	}
	seen[s.Name] = true
	if s.RemovedTopologyFile != "" {
		p.bad(f+".topologyFile", s.RemovedTopologyFile, "no longer accepted: the node agent mounts the NCCL topology file of the node's instance type "+
			"(or the AgentConfig profile); remove the field")
	}
	s.validateNCCL(p, f)
	s.validateCounts(p, f)
	s.validateResources(p, f, shared)
	s.validateEnv(p, f)
}

// validateNCCL checks the conf file's variables: NCCL_* names, single lines
// within NCCL's limit, each under nccl or wholeNodeNCCL, not both.
func (s ProfileSpec) validateNCCL(p *problems, f string) {
	for _, k := range slices.Sorted(maps.Keys(s.NCCL)) {
		if !strings.HasPrefix(k, "NCCL_") || !envName.MatchString(k) {
			p.bad(f+".nccl", k, "keys must be NCCL_* variable names (other variables go under env)")
		}
		if k == "NCCL_CONF_FILE" {
			p.bad(f+".nccl", k, "NCCL_CONF_FILE is set by ibkube to load this very file")
		}
		if v := s.NCCL[k]; !confLine(v) {
			p.bad(f+".nccl."+k, v, "want a single line of at most 1023 bytes (NCCL's conf file limit)")
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.WholeNodeNCCL)) {
		if !strings.HasPrefix(k, "NCCL_") || !envName.MatchString(k) {
			p.bad(f+".wholeNodeNCCL", k, "keys must be NCCL_* variable names")
		}
		if _, ok := s.NCCL[k]; ok {
			p.bad(f+".wholeNodeNCCL", k, "also under nccl; a variable goes under one of them")
		}
		if v := s.WholeNodeNCCL[k]; !confLine(v) {
			p.bad(f+".wholeNodeNCCL."+k, v, "want a single line of at most 1023 bytes (NCCL's conf file limit)")
		}
	}
}

// confLine says whether v fits one line of NCCL's conf file.
func confLine(v string) bool { return !strings.ContainsAny(v, "\n\r") && len(v) <= 1023 }

func (s ProfileSpec) validateCounts(p *problems, f string) {
	if s.GPUsPerNode != nil && (*s.GPUsPerNode < 0 || *s.GPUsPerNode > MaxHCAs) {
		p.bad(f+".gpusPerNode", fmt.Sprint(*s.GPUsPerNode), fmt.Sprintf("want an integer from 0 (unknown) to %d", MaxHCAs))
	}
	if s.HCAsPerGPU != nil && (*s.HCAsPerGPU < 0 || *s.HCAsPerGPU > MaxHCAs) {
		p.bad(f+".hcasPerGPU", fmt.Sprint(*s.HCAsPerGPU), fmt.Sprintf("want an integer from 0 (meaning 1) to %d", MaxHCAs))
	}
}

func (s ProfileSpec) validateResources(p *problems, f, shared string) {
	for _, r := range [...]struct{ field, v string }{{"exclusiveResource", s.ExclusiveResource}, {"gpuResource", s.GPUResource}} {
		if r.v != "" && !isExtendedResource(r.v) {
			p.bad(f+"."+r.field, r.v, "want an extended resource name such as rdma/roce (domain/name)")
		}
	}
	if s.ExclusiveResource != "" && s.ExclusiveResource == shared {
		p.bad(f+".exclusiveResource", s.ExclusiveResource, "must differ from resources.shared")
	}
}

func (s ProfileSpec) validateEnv(p *problems, f string) {
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		if !envName.MatchString(k) {
			p.bad(f+".env", k, "want an environment variable name")
		} else if strings.HasPrefix(k, "NCCL_") {
			p.bad(f+".env", k, "NCCL_* variables go under nccl, so user env always overrides them")
		}
	}
}

// resolve builds the profile table: built-ins, then the user's profiles in
// order (overriding same-named ones, starting from Base if given).
func (c *Config) resolve() error {
	res := map[string]nccl.Profile{}
	for _, p := range nccl.Builtin() {
		res[p.Name] = p
	}
	var errs []error
	for i, s := range c.Profiles {
		var p nccl.Profile
		switch {
		case s.Base != "":
			b, ok := res[s.Base]
			if !ok {
				errs = append(errs, fmt.Errorf("profiles[%d].base: invalid value %q: want one of %s (built-in or defined earlier)", i, s.Base, strings.Join(slices.Sorted(maps.Keys(res)), ", ")))
				continue
			}
			p = b
		default:
			p = res[s.Name] // zero when new
		}
		p.Name = s.Name
		if s.Description != "" {
			p.Description = s.Description
		}
		if s.GPUsPerNode != nil {
			p.GPUsPerNode = *s.GPUsPerNode
		}
		if s.HCAsPerGPU != nil {
			p.HCAsPerGPU = *s.HCAsPerGPU
		}
		if s.ExclusiveResource != "" {
			p.ExclusiveResource = s.ExclusiveResource
		}
		if s.GPUResource != "" {
			p.GPUResource = s.GPUResource
		}
		p.NCCL = overlay(overlay(p.NCCL, s.NCCL, false), s.WholeNodeNCCL, true)
		p.Env = overlay(p.Env, s.Env, false)
		res[s.Name] = p
	}
	if _, ok := res[c.DefaultProfile]; !ok {
		errs = append(errs, fmt.Errorf("defaultProfile: invalid value %q: want one of %s", c.DefaultProfile, strings.Join(slices.Sorted(maps.Keys(res)), ", ")))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	c.resolved = res
	return nil
}

// overlay returns base with the values of over replacing or appending, in
// base order then over's sorted keys, as a new slice. A replaced or added
// value is the site's (no Source) and whole-node only if wholeNode: a site
// that sets a variable under nccl means it for every pod of the profile.
func overlay(base []nccl.Var, over map[string]string, wholeNode bool) []nccl.Var {
	out := make([]nccl.Var, 0, len(base)+len(over))
	for _, v := range base {
		if nv, ok := over[v.Name]; ok {
			v = nccl.Var{Name: v.Name, Value: nv, WholeNode: wholeNode}
		}
		out = append(out, v)
	}
	for _, k := range slices.Sorted(maps.Keys(over)) {
		if _, ok := nccl.Lookup(base, k); !ok {
			out = append(out, nccl.Var{Name: k, Value: over[k], WholeNode: wholeNode})
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// MaxHCAs bounds the hcas annotation and defaultHCAs (OCI BM.GPU.H100.8 has 16 ports).
const MaxHCAs = 64

// ValidateMemlock checks a memlock value by the rule the node agent applies
// it with (internal/memlockvalue): "unlimited" or a positive whole number of
// bytes below 8Ei. The error says what is wrong and what is accepted; callers
// name the field and the value.
func ValidateMemlock(v string) error {
	if _, err := memlockvalue.Parse(v); err != nil {
		var e *memlockvalue.Error
		if errors.As(err, &e) {
			return fmt.Errorf("%s; want %s", e.Detail(), memlockvalue.Accepted)
		}
		return err
	}
	return nil
}
