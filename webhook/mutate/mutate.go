package mutate

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/ibkube/ibkube/cni/multus"
	"github.com/ibkube/ibkube/internal/version"
	"github.com/ibkube/ibkube/nccl"
	"github.com/ibkube/ibkube/webhook/config"
)

// mode is a parsed mode annotation.
type mode struct {
	shared, exclusive, ipoib bool
}

func (m mode) rdma() bool { return m.shared || m.exclusive }

func (m mode) String() string {
	var parts []string
	switch {
	case m.shared:
		parts = append(parts, ModeShared)
	case m.exclusive:
		parts = append(parts, ModeExclusive)
	}
	if m.ipoib {
		parts = append(parts, ModeIPoIB)
	}
	if len(parts) == 0 {
		return ModeNone
	}
	return strings.Join(parts, ",")
}

// target is one selected container and where it sits in the pod JSON.
type target struct {
	c    *corev1.Container
	path string // e.g. /spec/containers/0
}

// Mutate mutates pod in place and returns the RFC 6902 patch that turns the
// original pod into it. A pod outside an opted-in namespace, or without a
// mode, is left alone (Result zero). Denials are *Refusal.
//
// Mutate only ever adds: every step first checks whether what it would add
// is already there (written by the user or by an earlier admission), so
// Mutate of a mutated pod returns an empty patch.
func Mutate(pod *corev1.Pod, ns Namespace, cfg *config.Config) (Result, error) {
	if ns.Labels[LabelInject] != InjectEnabled {
		return Result{}, nil
	}
	for k := range pod.Annotations {
		if s, ok := strings.CutPrefix(k, Prefix); ok && !knownKey(s) {
			return Result{}, refusef("annotation %s: unknown key under %s; accepted keys: %s", k, Prefix, acceptedKeys())
		}
	}
	m, ok, err := resolveMode(pod, ns, cfg)
	if err != nil || !ok {
		return Result{}, err
	}
	profile, profileName, err := resolveProfile(pod, ns, cfg)
	if err != nil {
		return Result{}, err
	}
	targets, err := selectContainers(pod, cfg)
	if err != nil {
		return Result{}, err
	}
	hcas, err := parseHCAs(pod)
	if err != nil {
		return Result{}, err
	}
	memlock, hasMemlock := pod.Annotations[AnnotationMemlock]
	if hasMemlock {
		if err := config.ValidateMemlock(memlock); err != nil {
			return Result{}, refusef("annotation %s: invalid value %q: %v", AnnotationMemlock, memlock, err)
		}
	}

	p := patcher{ops: make([]PatchOp, 0, 8*len(targets)+6)}
	modeName := m.String()
	res := Result{Injected: true, Mode: modeName}
	warn := func(format string, args ...any) { res.Warnings = append(res.Warnings, fmt.Sprintf(format, args...)) }

	if hcas > 0 && !m.exclusive {
		warn("annotation %s is ignored: it applies to mode %s only", AnnotationHCAs, ModeExclusive)
	}

	addCap := m.rdma()
	if addCap {
		switch cfg.CapabilityPolicy {
		case config.CapabilityNever:
			addCap = false
		case config.CapabilityAuto:
			if lvl := ns.Labels[LabelPodSecurityEnforce]; lvl == "baseline" || lvl == "restricted" {
				addCap = false
				if missingCap(targets) {
					warn("IPC_LOCK not added: namespace %q enforces Pod Security %q, which forbids it; "+
						"locked memory for RDMA comes from the node agent (annotation %s)", ns.Name, lvl, AnnotationMemlock)
				}
			}
		}
	}

	// Pod annotations, in a fixed order, collected and written at the end.
	var annos []kv
	confText := ""
	if _, ok := pod.Annotations[AnnotationNCCLConf]; !ok {
		ifname, err := ipoibInterface(pod, m, cfg)
		if err != nil {
			return Result{}, err
		}
		confText = ncclConf(profileName, modeName, m, profile, ifname)
		annos = append(annos, kv{AnnotationNCCLConf, confText})
	}
	if m.rdma() && !hasMemlock {
		annos = append(annos, kv{AnnotationMemlock, cfg.Memlock})
	}
	if m.ipoib {
		existing := pod.Annotations[multus.Annotation]
		net := multus.Network{Namespace: cfg.IPoIBNamespace(), Name: cfg.IPoIB.Name, Interface: cfg.IPoIB.Interface}
		v, changed, err := multus.Merge(existing, []multus.Network{net}, pod.Namespace)
		if err != nil {
			return Result{}, refusef("annotation %s: invalid value %q: %v; accepted: a comma-separated list of [namespace/]name[@interface] or a JSON list of network selection elements",
				multus.Annotation, existing, err)
		}
		if changed {
			annos = append(annos, kv{multus.Annotation, v})
		}
	}

	for _, t := range targets {
		c := t.c
		if m.shared {
			p.ensureResource(t, cfg.Resources.Shared, 1, warn)
		}
		if m.exclusive {
			n := hcas
			if n == 0 {
				n = gpuCount(c, cfg.GPUResource)
			}
			if n == 0 {
				n = int64(cfg.DefaultHCAs)
			}
			p.ensureResource(t, cfg.Resources.Exclusive, n, warn)
		}
		if addCap {
			p.ensureCapability(t, "IPC_LOCK")
		}
		p.ensureEnv(t, profile, warn)
		p.ensureMount(t, warn)
	}
	p.ensureVolume(pod)

	if _, ok := pod.Annotations[AnnotationInjected]; !ok {
		annos = append(annos, kv{AnnotationInjected, status(modeName, targets, profileName)})
	}
	p.addAnnotations(pod, annos)
	res.Patch = p.ops
	if len(res.Patch) == 0 {
		res.Patch = nil
	}
	return res, nil
}

type kv struct{ k, v string }

func refusef(format string, args ...any) *Refusal {
	return &Refusal{Msg: fmt.Sprintf(format, args...)}
}

// parseMode reads a mode value; where names the annotation for messages.
func parseMode(v, where string) (mode, error) {
	var m mode
	none := false
	for _, part := range strings.Split(v, ",") {
		switch strings.TrimSpace(part) {
		case ModeShared:
			m.shared = true
		case ModeExclusive:
			m.exclusive = true
		case ModeIPoIB:
			m.ipoib = true
		case ModeNone:
			none = true
		default:
			return m, refusef("%s: invalid value %q: unknown mode %q; accepted: %s", where, v, strings.TrimSpace(part), acceptedModes)
		}
	}
	switch {
	case m.shared && m.exclusive:
		return m, refusef("%s: invalid value %q: %s and %s exclude each other; accepted: %s", where, v, ModeShared, ModeExclusive, acceptedModes)
	case none && (m.shared || m.exclusive || m.ipoib):
		return m, refusef("%s: invalid value %q: %s cannot be combined; accepted: %s", where, v, ModeNone, acceptedModes)
	}
	return m, nil
}

// resolveMode returns the pod's mode; ok is false when nothing is to be
// injected (no mode, or none).
func resolveMode(pod *corev1.Pod, ns Namespace, cfg *config.Config) (mode, bool, error) {
	if v, ok := pod.Annotations[AnnotationMode]; ok {
		m, err := parseMode(v, "annotation "+AnnotationMode)
		return m, err == nil && m != (mode{}), err
	}
	v, ok := ns.Annotations[AnnotationMode]
	if !ok || !requestsGPU(pod, cfg.GPUResource) {
		return mode{}, false, nil
	}
	m, err := parseMode(v, fmt.Sprintf("namespace %s annotation %s", ns.Name, AnnotationMode))
	return m, err == nil && m != (mode{}), err
}

func resolveProfile(pod *corev1.Pod, ns Namespace, cfg *config.Config) (nccl.Profile, string, error) {
	name, where := cfg.DefaultProfile, "config defaultProfile"
	if v, ok := pod.Annotations[AnnotationProfile]; ok {
		name, where = v, "annotation "+AnnotationProfile
	} else if v, ok := ns.Annotations[AnnotationProfile]; ok {
		name, where = v, fmt.Sprintf("namespace %s annotation %s", ns.Name, AnnotationProfile)
	}
	p, ok := cfg.Profile(name)
	if !ok {
		return p, "", refusef("%s: invalid value %q: unknown profile; accepted: %s", where, name, strings.Join(cfg.ProfileNames(), ", "))
	}
	return p, name, nil
}

func parseHCAs(pod *corev1.Pod) (int64, error) {
	v, ok := pod.Annotations[AnnotationHCAs]
	if !ok {
		return 0, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 1 || n > config.MaxHCAs {
		return 0, refusef("annotation %s: invalid value %q: accepted: an integer from 1 to %d (HCAs per selected container)", AnnotationHCAs, v, config.MaxHCAs)
	}
	return n, nil
}

func isSidecar(c *corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// selectContainers returns the containers named by the containers
// annotation, else the regular containers requesting GPUs, else every
// regular container.
func selectContainers(pod *corev1.Pod, cfg *config.Config) ([]target, error) {
	spec := &pod.Spec
	if v, ok := pod.Annotations[AnnotationContainers]; ok {
		var out []target
		seen := map[string]bool{}
		for _, raw := range strings.Split(v, ",") {
			name := strings.TrimSpace(raw)
			if seen[name] {
				continue
			}
			seen[name] = true
			t, found := findContainer(spec, name)
			if !found {
				return nil, refusef("annotation %s: invalid value %q: no container named %q; accepted: a comma-separated list of this pod's containers: %s",
					AnnotationContainers, v, name, containerNames(spec))
			}
			out = append(out, t)
		}
		return out, nil
	}
	var out []target
	for i := range spec.Containers {
		if gpuCount(&spec.Containers[i], cfg.GPUResource) > 0 {
			out = append(out, target{&spec.Containers[i], containerPath("/spec/containers/", i)})
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	out = make([]target, len(spec.Containers))
	for i := range spec.Containers {
		out[i] = target{&spec.Containers[i], containerPath("/spec/containers/", i)}
	}
	return out, nil
}

func containerPath(prefix string, i int) string { return prefix + strconv.Itoa(i) }

func findContainer(spec *corev1.PodSpec, name string) (target, bool) {
	if name == "" {
		return target{}, false
	}
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return target{&spec.Containers[i], containerPath("/spec/containers/", i)}, true
		}
	}
	for i := range spec.InitContainers {
		if spec.InitContainers[i].Name == name {
			return target{&spec.InitContainers[i], containerPath("/spec/initContainers/", i)}, true
		}
	}
	return target{}, false
}

func containerNames(spec *corev1.PodSpec) string {
	var names []string
	for _, c := range spec.Containers {
		names = append(names, c.Name)
	}
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		if isSidecar(c) {
			names = append(names, c.Name+" (sidecar)")
		} else {
			names = append(names, c.Name+" (init)")
		}
	}
	return strings.Join(names, ", ")
}

func gpuCount(c *corev1.Container, gpu string) int64 {
	name := corev1.ResourceName(gpu)
	if q, ok := c.Resources.Limits[name]; ok {
		return q.Value()
	}
	if q, ok := c.Resources.Requests[name]; ok {
		return q.Value()
	}
	return 0
}

func requestsGPU(pod *corev1.Pod, gpu string) bool {
	for i := range pod.Spec.Containers {
		if gpuCount(&pod.Spec.Containers[i], gpu) > 0 {
			return true
		}
	}
	for i := range pod.Spec.InitContainers {
		if gpuCount(&pod.Spec.InitContainers[i], gpu) > 0 {
			return true
		}
	}
	return false
}

func hasCapability(c *corev1.Container, capName corev1.Capability) bool {
	if c.SecurityContext == nil || c.SecurityContext.Capabilities == nil {
		return false
	}
	for _, a := range c.SecurityContext.Capabilities.Add {
		if a == capName || a == "CAP_"+capName || a == "ALL" {
			return true
		}
	}
	return false
}

func missingCap(targets []target) bool {
	for _, t := range targets {
		if !hasCapability(t.c, "IPC_LOCK") {
			return true
		}
	}
	return false
}

// ipoibInterface is the pod interface of the IPoIB network for
// NCCL_SOCKET_IFNAME in ipoib-only mode ("" when not needed): the configured
// interface, else the name Multus gives it (net<position>).
func ipoibInterface(pod *corev1.Pod, m mode, cfg *config.Config) (string, error) {
	if !m.ipoib || m.rdma() {
		return "", nil
	}
	if cfg.IPoIB.Interface != "" {
		return cfg.IPoIB.Interface, nil
	}
	existing := pod.Annotations[multus.Annotation]
	nets, err := multus.Parse(existing, pod.Namespace)
	if err != nil {
		return "", refusef("annotation %s: invalid value %q: %v; accepted: a comma-separated list of [namespace/]name[@interface] or a JSON list of network selection elements",
			multus.Annotation, existing, err)
	}
	ns := cfg.IPoIBNamespace()
	if ns == "" {
		ns = pod.Namespace
	}
	for i, n := range nets {
		if n.Namespace == ns && n.Name == cfg.IPoIB.Name {
			if n.Interface != "" {
				return n.Interface, nil
			}
			return "net" + strconv.Itoa(i+1), nil
		}
	}
	return "net" + strconv.Itoa(len(nets)+1), nil
}

// ncclConf renders the NCCL conf file. NCCL loads it with setenv(name,
// value, 0), so every variable in the container's environment, from env,
// envFrom or the device plugin, overrides these lines.
func ncclConf(profileName, modeName string, m mode, p nccl.Profile, ifname string) string {
	var b strings.Builder
	b.Grow(128)
	b.WriteString("# Written by ibkube: profile ")
	b.WriteString(profileName)
	b.WriteString(", mode ")
	b.WriteString(modeName)
	b.WriteString(".\n# Any environment variable overrides a line here.\n")
	seen := make(map[string]bool, len(p.NCCL)+2)
	line := func(k, v string) {
		if seen[k] {
			return
		}
		seen[k] = true
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(v)
		b.WriteByte('\n')
	}
	if m.rdma() {
		line("NCCL_IB_DISABLE", "0")
	}
	if ifname != "" {
		line("NCCL_SOCKET_IFNAME", ifname)
	}
	for _, v := range p.NCCL {
		line(v.Name, v.Value)
	}
	return b.String()
}

func status(modeName string, targets []target, profile string) string {
	names := make([]string, len(targets))
	for i, t := range targets {
		names[i] = t.c.Name
	}
	sort.Strings(names)
	return "mode=" + modeName + "; containers=" + strings.Join(names, ",") + "; profile=" + profile + "; version=" + version.Version
}

// quantity renders n the way the API server does.
func quantity(n int64) resource.Quantity { return *resource.NewQuantity(n, resource.DecimalSI) }
