package mutate

import (
	"errors"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/internal/version"
	"github.com/ibkube/ibkube/nccl"
	"github.com/ibkube/ibkube/webhook/config"
	"github.com/ibkube/ibkube/webhook/multus"
)

// Mutate mutates pod in place and returns the RFC 6902 patch that turns the
// original pod into it. A pod outside an opted-in namespace, or without a
// mode, is left alone (Result zero). Denials are *Refusal.
//
// Mutate first decides (decide: a plan of what each selected container and
// the pod lack, and why), then applies the plan. It only ever adds: every
// decision first checks whether what it would add is already there
// (written by the user or by an earlier admission), so Mutate of a mutated
// pod returns an empty patch.
func Mutate(pod *corev1.Pod, ns Namespace, cfg *config.Config) (Result, error) {
	pl, err := decide(pod, ns, cfg)
	if err != nil || pl == nil {
		return Result{}, err
	}
	res := Result{Injected: true, Mode: pl.mode, Warnings: pl.warnings, Patch: apply(pod, pl)}
	if len(res.Patch) == 0 {
		res.Patch = nil
	}
	return res, nil
}

// gpuResource is the resource that counts GPUs for pods of profile.
func gpuResource(profile nccl.Profile, cfg *config.Config) string {
	if profile.GPUResource != "" {
		return profile.GPUResource
	}
	return cfg.GPUResource
}

// exclusiveCounts returns the rdma-exclusive count of each target: the hcas
// annotation, else the container's GPUs times the profile's HCAs per GPU,
// else defaultHCAs. A GPU count that gives no count within 1..MaxHCAs is
// refused rather than passed on: the API server would reject a negative
// quantity only after admission, and a huge one would leave the pod Pending
// for ever.
func exclusiveCounts(targets []target, hcas int64, gpuRes string, profile nccl.Profile, cfg *config.Config) ([]int64, error) {
	perGPU := int64(profile.HCAsPerGPU)
	if perGPU < 1 {
		perGPU = 1
	}
	counts := make([]int64, len(targets))
	for i, t := range targets {
		if hcas > 0 {
			counts[i] = hcas
			continue
		}
		g := gpuCount(t.c, gpuRes)
		switch {
		case g == 0:
			counts[i] = int64(cfg.DefaultHCAs)
		case g < 0 || g > config.MaxHCAs/perGPU:
			return nil, refusef("container %q requests %s: %s, which gives no rdma-exclusive count from 1 to %d (%d HCA(s) per GPU, profile %s); "+
				"accepted: a GPU count from 1 to %d, or annotation %s with an integer from 1 to %d",
				t.c.Name, gpuRes, gpuCountText(g), config.MaxHCAs, perGPU, profile.Name, config.MaxHCAs/perGPU, contract.AnnotationHCAs, config.MaxHCAs)
		default:
			counts[i] = g * perGPU
		}
	}
	return counts, nil
}

// holdsWholeNode reports whether the selected containers that request GPUs
// each hold all gpusPerNode GPUs of the machine (and at least one does):
// only then is every GPU known to have its own HCA beside it.
func holdsWholeNode(targets []target, gpuRes string, gpusPerNode int) bool {
	if gpusPerNode <= 0 {
		return false
	}
	found := false
	for _, t := range targets {
		switch g := gpuCount(t.c, gpuRes); {
		case g == 0:
		case g == int64(gpusPerNode):
			found = true
		default:
			return false
		}
	}
	return found
}

// resolveSocketFallback reads the socket-fallback setting of the pod, else
// of its namespace; true means NCCL must fail rather than fall back.
func resolveSocketFallback(pod *corev1.Pod, ns Namespace) (bool, error) {
	if v, ok := pod.Annotations[contract.AnnotationSocketFallback]; ok {
		return parseSocketFallback(v, "annotation "+contract.AnnotationSocketFallback)
	}
	if v, ok := ns.Annotations[contract.AnnotationSocketFallback]; ok {
		return parseSocketFallback(v, fmt.Sprintf("namespace %s annotation %s", ns.Name, contract.AnnotationSocketFallback))
	}
	return false, nil
}

// parseSocketFallback reads a socket-fallback value; where names the
// annotation for messages.
func parseSocketFallback(v, where string) (bool, error) {
	switch v {
	case contract.SocketFallbackAllow:
		return false, nil
	case contract.SocketFallbackDeny:
		return true, nil
	}
	e, _ := contract.EnumOf(contract.AnnotationSocketFallback)
	return false, refusef("%s: invalid value %s: accepted: %s", where, echo(v), e.Accepted)
}

// warnWholeHostDevices warns about selected containers that see HCAs of
// the node whatever ibkube allocates: privileged containers get all of the
// host's /dev, a hostPath of /dev/infiniband (or a parent of it) mounts
// every RDMA char device, and one below it mounts some.
func warnWholeHostDevices(pod *corev1.Pod, targets []target, warn func(string, ...any)) {
	hostDev := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		if v.HostPath == nil {
			continue
		}
		if p := path.Clean("/" + v.HostPath.Path); p == "/" || p == "/dev" || p == "/dev/infiniband" || strings.HasPrefix(p, "/dev/infiniband/") {
			hostDev[v.Name] = p
		}
	}
	for _, t := range targets {
		c := t.c
		if sc := c.SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged {
			warn("container %q is privileged, so it sees every HCA of the node (all of the host's /dev/infiniband), not only those ibkube allocates to it; "+
				"drop privileged (ibkube adds IPC_LOCK and the RDMA devices) to keep pods apart", c.Name)
			continue
		}
		for _, vm := range c.VolumeMounts {
			if p, ok := hostDev[vm.Name]; ok {
				warn("container %q mounts hostPath %s, so it sees the node's RDMA devices, not only those ibkube allocates to it; "+
					"drop the hostPath volume %q (the device plugin hands out the RDMA devices) to keep pods apart", c.Name, p, vm.Name)
				break
			}
		}
	}
}

type kv struct{ k, v string }

func refusef(format string, args ...any) *Refusal {
	return &Refusal{Msg: bound(fmt.Sprintf(format, args...), maxMessage)}
}

// Bounds on what a refusal or warning repeats of the pod: an annotation may
// hold up to 256 KiB and names are validated only after admission, so an
// unbounded echo would turn a large bad value into a larger response and
// log line.
const (
	maxEcho    = 256
	maxMessage = 4096
)

// echo quotes a value the pod supplied for a message, cut to maxEcho bytes
// with a marker saying how much was left out.
func echo(v string) string {
	return strconv.Quote(bound(v, maxEcho))
}

// Clip cuts a value a request supplied to the same maxEcho bytes, unquoted,
// for the admission handler's messages and log lines about the request's
// own fields (uid, kind, name, a header), which a forged review may fill
// with megabytes.
func Clip(v string) string {
	return bound(v, maxEcho)
}

// bound cuts s to at most n bytes (on a UTF-8 boundary) plus a marker
// naming how many bytes were cut.
func bound(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("...[%d more bytes]", len(s)-cut)
}

// parseMode reads a mode value; where names the annotation for messages.
func parseMode(v, where string) (contract.Mode, error) {
	m, err := contract.ParseMode(v)
	var e *contract.ModeError
	switch {
	case err == nil:
		return m, nil
	case errors.As(err, &e) && e.Conflict != "":
		return m, refusef("%s: invalid value %s: %s; accepted: %s", where, echo(v), e.Conflict, contract.AcceptedModes)
	case errors.As(err, &e):
		return m, refusef("%s: invalid value %s: unknown mode %s; accepted: %s", where, echo(v), echo(e.Unknown), contract.AcceptedModes)
	}
	return m, refusef("%s: invalid value %s: %v", where, echo(v), err)
}

// resolveMode returns the pod's mode; ok is false when nothing is to be
// injected (no mode, or none).
func resolveMode(pod *corev1.Pod, ns Namespace, cfg *config.Config) (contract.Mode, bool, error) {
	if v, ok := pod.Annotations[contract.AnnotationMode]; ok {
		m, err := parseMode(v, "annotation "+contract.AnnotationMode)
		return m, err == nil && m != (contract.Mode{}), err
	}
	v, ok := ns.Annotations[contract.AnnotationMode]
	if !ok || !requestsGPU(pod, podGPUResources(pod, ns, cfg)) {
		return contract.Mode{}, false, nil
	}
	m, err := parseMode(v, fmt.Sprintf("namespace %s annotation %s", ns.Name, contract.AnnotationMode))
	return m, err == nil && m != (contract.Mode{}), err
}

func resolveProfile(pod *corev1.Pod, ns Namespace, cfg *config.Config) (nccl.Profile, string, error) {
	name, where := cfg.DefaultProfile, "config defaultProfile"
	if v, ok := pod.Annotations[contract.AnnotationProfile]; ok {
		name, where = v, "annotation "+contract.AnnotationProfile
	} else if v, ok := ns.Annotations[contract.AnnotationProfile]; ok {
		name, where = v, fmt.Sprintf("namespace %s annotation %s", ns.Name, contract.AnnotationProfile)
	}
	p, ok := cfg.Profile(name)
	if !ok {
		return p, "", refusef("%s: invalid value %s: unknown profile; accepted: %s", where, echo(name), strings.Join(cfg.ProfileNames(), ", "))
	}
	return p, name, nil
}

func parseHCAs(pod *corev1.Pod) (int64, error) {
	v, ok := pod.Annotations[contract.AnnotationHCAs]
	if !ok {
		return 0, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 1 || n > config.MaxHCAs {
		return 0, refusef("annotation %s: invalid value %s: accepted: an integer from 1 to %d (HCAs per selected container)", contract.AnnotationHCAs, echo(v), config.MaxHCAs)
	}
	return n, nil
}

func isSidecar(c *corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// selectContainers returns the containers named by the containers
// annotation, else the regular containers requesting GPUs, else every
// regular container.
func selectContainers(pod *corev1.Pod, gpuRes string) ([]target, error) {
	spec := &pod.Spec
	if v, ok := pod.Annotations[contract.AnnotationContainers]; ok {
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
				return nil, refusef("annotation %s: invalid value %s: no container named %s; accepted: a comma-separated list of this pod's containers: %s",
					contract.AnnotationContainers, echo(v), echo(name), bound(containerNames(spec), maxEcho))
			}
			out = append(out, t)
		}
		return out, nil
	}
	var out []target
	for i := range spec.Containers {
		if asksGPU(&spec.Containers[i], gpuRes) {
			out = append(out, regularTarget(spec, i))
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	out = make([]target, len(spec.Containers))
	for i := range spec.Containers {
		out[i] = regularTarget(spec, i)
	}
	return out, nil
}

func findContainer(spec *corev1.PodSpec, name string) (target, bool) {
	if name == "" {
		return target{}, false
	}
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return regularTarget(spec, i), true
		}
	}
	for i := range spec.InitContainers {
		if spec.InitContainers[i].Name == name {
			return initTarget(spec, i), true
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
	n, _ := quantityOf(c, corev1.ResourceName(gpu))
	return n
}

// podGPUResources are the resources that count as GPUs for a pod: the
// config's, and its profile's when that names another (amd.com/gpu). A
// profile that does not resolve adds nothing here; it is refused later.
func podGPUResources(pod *corev1.Pod, ns Namespace, cfg *config.Config) []string {
	out := []string{cfg.GPUResource}
	if p, _, err := resolveProfile(pod, ns, cfg); err == nil && p.GPUResource != "" && p.GPUResource != cfg.GPUResource {
		out = append(out, p.GPUResource)
	}
	return out
}

// asksGPU says whether the container asks for GPUs: by the resource, or
// by an aligned claim that took the resource's place at an earlier
// admission.
func asksGPU(c *corev1.Container, gpu string) bool {
	return gpuCount(c, gpu) > 0 || holdsAlignedClaim(c)
}

func requestsGPU(pod *corev1.Pod, gpus []string) bool {
	for _, gpu := range gpus {
		for i := range pod.Spec.Containers {
			if asksGPU(&pod.Spec.Containers[i], gpu) {
				return true
			}
		}
		for i := range pod.Spec.InitContainers {
			if asksGPU(&pod.Spec.InitContainers[i], gpu) {
				return true
			}
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
func ipoibInterface(pod *corev1.Pod, m contract.Mode, cfg *config.Config) (string, error) {
	if !m.IPoIB || m.RDMA() {
		return "", nil
	}
	if cfg.IPoIB.Interface != "" {
		return cfg.IPoIB.Interface, nil
	}
	existing := pod.Annotations[multus.Annotation]
	nets, err := multus.Parse(existing, pod.Namespace)
	if err != nil {
		return "", refusef("annotation %s: invalid value %s: %v; accepted: a comma-separated list of [namespace/]name[@interface] or a JSON list of network selection elements",
			multus.Annotation, echo(existing), err)
	}
	ns := cfg.IPoIBNamespaceFor(pod.Namespace)
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

// confInput is what the NCCL conf file is rendered from.
type confInput struct {
	profileName, modeName string
	m                     contract.Mode
	profile               nccl.Profile
	// ifname is the IPoIB interface for NCCL_SOCKET_IFNAME ("" for none).
	ifname string
	// wholeNode: the pod's GPU containers hold the whole machine, so the
	// profile's WholeNode values apply.
	wholeNode bool
	// failClosed: NCCL must fail rather than fall back to sockets.
	failClosed bool
}

// ncclConf renders the NCCL conf file. NCCL loads it with setenv(name,
// value, 0), so every variable in the container's environment, from env,
// envFrom or the device plugin, overrides these lines.
func ncclConf(in confInput) string {
	p := in.profile
	var b strings.Builder
	b.Grow(128)
	b.WriteString("# Written by ibkube: profile ")
	b.WriteString(in.profileName)
	b.WriteString(", mode ")
	b.WriteString(in.modeName)
	b.WriteString(".\n# Any environment variable overrides a line here.\n")
	seen := make(map[string]bool, len(p.NCCL)+3)
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
	if in.m.RDMA() {
		line("NCCL_IB_DISABLE", "0")
	}
	if in.failClosed {
		// NCCL_NET names the only network plugin NCCL may use; when the IB
		// plugin (InfiniBand and RoCE) fails to initialise or finds no
		// device, communicator init fails with "Failed to initialize any
		// NET plugin" instead of going on over sockets (NVIDIA/nccl
		// src/init.cc reads NCCL_NET into config.netName; src/plugin/net.cc
		// ncclNetInit skips every plugin of another name and returns
		// ncclInvalidUsage when none is enabled).
		line("NCCL_NET", "IB")
	}
	if in.ifname != "" {
		line("NCCL_SOCKET_IFNAME", in.ifname)
	}
	var skipped []string
	for _, v := range p.NCCL {
		if v.WholeNode && !in.wholeNode {
			if !seen[v.Name] {
				// No '=' in a comment: NCCL before 2.26.2 skips no '#'
				// line and sets a variable from any line holding one
				// (NVIDIA/nccl v2.25.1-1 src/misc/param.cc).
				skipped = append(skipped, v.Name+" ("+v.Value+")")
			}
			continue
		}
		line(v.Name, v.Value)
	}
	leftOut(&b, p.GPUsPerNode, skipped)
	return b.String()
}

// leftOut writes the comment naming the whole-node settings a partial-node
// pod does not get, if any.
func leftOut(b *strings.Builder, gpusPerNode int, skipped []string) {
	if len(skipped) == 0 {
		return
	}
	if gpusPerNode > 0 {
		b.WriteString("# Left out, as this pod does not hold all ")
		b.WriteString(strconv.Itoa(gpusPerNode))
		b.WriteString(" GPUs of the machine (GPU/HCA pairing unknown): ")
	} else {
		b.WriteString("# Left out, as the profile states no GPUs per machine (GPU/HCA pairing unknown): ")
	}
	b.WriteString(strings.Join(skipped, " "))
	b.WriteByte('\n')
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
