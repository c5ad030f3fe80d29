package mutate

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/nccl"
	"github.com/ibkube/ibkube/webhook/config"
	"github.com/ibkube/ibkube/webhook/multus"
)

// plan is what Mutate decided for one pod before it changes anything: per
// selected container what is missing, the pod-level additions, and the
// warnings saying what was left alone and why. apply turns it into the
// patch; deciding never changes the pod.
type plan struct {
	mode        contract.Mode
	containers  []containerPlan
	volume      bool // add the downwardAPI volume of the NCCL conf file
	annotations []kv // in the order they are written
	warnings    []string
	// jobAffinity is the partition affinity term to the pod's job; nil
	// for none.
	jobAffinity *corev1.PodAffinityTerm
	// claims are the aligned GPU+HCA claims replacing containers' extended
	// resources (alignedClaims on).
	claims []alignedClaim
}

// containerPlan is what one selected container lacks.
type containerPlan struct {
	target
	resources  []resourceAdd
	capability corev1.Capability // "" for none
	env        []corev1.EnvVar
	mount      bool // the conf volume's mount
}

// resourceAdd is a resource a container gets in limits and requests.
type resourceAdd struct {
	name  corev1.ResourceName
	count int64
}

func (pl *plan) warn(format string, args ...any) {
	pl.warnings = append(pl.warnings, bound(fmt.Sprintf(format, args...), maxMessage))
}

// decision is the state decide's steps share: the inputs and what the
// earlier steps resolved.
type decision struct {
	pod *corev1.Pod
	ns  Namespace
	cfg *config.Config

	mode        contract.Mode
	failClosed  bool
	profile     nccl.Profile
	profileName string
	gpuRes      string
	targets     []target
	hcas        int64   // the hcas annotation, 0 when absent
	counts      []int64 // rdma-exclusive count per target
	addCap      bool    // IPC_LOCK wanted by the capability policy
	// holders are the paths of the selected containers whose HCAs come
	// from an aligned claim, planned or held since an earlier admission.
	holders map[string]bool

	plan plan
}

// decideStep is one decision; an error is a refusal (*Refusal).
type decideStep func(*decision) error

// decideSteps are Mutate's decisions in order, once the pod is known to be
// ibkube's. A new check (a limit) is a step that refuses; a new pod-level
// addition is a step that fills a field of plan, which apply writes.
func decideSteps() []decideStep {
	return []decideStep{
		(*decision).resolveSettings,
		(*decision).selectTargets,
		(*decision).boundNetworks,
		(*decision).warnPod,
		(*decision).decideAligned,
		(*decision).decideCapability,
		(*decision).decideAnnotations,
		(*decision).decideContainers,
		(*decision).decideVolume,
		(*decision).decideJobAffinity,
	}
}

// decide checks the pod's annotations and plans its mutation; the plan is
// nil when the pod is not to be mutated (namespace not opted in, no mode,
// mode none).
func decide(pod *corev1.Pod, ns Namespace, cfg *config.Config) (*plan, error) {
	if ns.Labels[contract.LabelInject] != contract.InjectEnabled || !Relevant(pod.Annotations, ns) {
		return nil, nil
	}
	if err := checkSize(pod, ns); err != nil {
		return nil, err
	}
	if err := checkAnnotations(pod); err != nil {
		return nil, err
	}
	m, ok, err := resolveMode(pod, ns, cfg)
	if err != nil || !ok {
		return nil, err
	}
	d := &decision{pod: pod, ns: ns, cfg: cfg, mode: m}
	d.plan.mode = m
	for _, step := range decideSteps() {
		if err := step(d); err != nil {
			return nil, err
		}
	}
	return &d.plan, nil
}

// checkAnnotations refuses unknown keys and bad values whatever the mode,
// so a bad value is refused where it is written, not on the day a mode is
// added.
func checkAnnotations(pod *corev1.Pod) error {
	for k := range pod.Annotations {
		if s, ok := strings.CutPrefix(k, contract.Prefix); ok && !contract.KnownKey(s) {
			return refusef("annotation %s: unknown key under %s; accepted keys: %s", bound(k, maxEcho), contract.Prefix, contract.AcceptedKeys())
		}
	}
	if v, ok := pod.Annotations[contract.AnnotationMemlock]; ok {
		if err := config.ValidateMemlock(v); err != nil {
			return refusef("annotation %s: invalid value %s: %v", contract.AnnotationMemlock, echo(v), err)
		}
	}
	if v, ok := pod.Annotations[contract.AnnotationSocketFallback]; ok {
		if _, err := parseSocketFallback(v, "annotation "+contract.AnnotationSocketFallback); err != nil {
			return err
		}
	}
	if err := checkEnum(pod, contract.AnnotationIdleWarning); err != nil {
		return err
	}
	return checkEnum(pod, contract.AnnotationPlacement)
}

// checkEnum refuses a value of enum-valued annotation key that
// contract.Enums does not accept.
func checkEnum(pod *corev1.Pod, key string) error {
	e, _ := contract.EnumOf(key)
	if v, ok := pod.Annotations[key]; ok && !slices.Contains(e.Values, v) {
		return refusef("annotation %s: invalid value %s; accepted: %s", key, echo(v), e.Accepted)
	}
	return nil
}

// resolveSettings resolves socket fallback, the profile and the resource
// that counts GPUs.
func (d *decision) resolveSettings() error {
	var err error
	if d.failClosed, err = resolveSocketFallback(d.pod, d.ns); err != nil {
		return err
	}
	if d.profile, d.profileName, err = resolveProfile(d.pod, d.ns, d.cfg); err != nil {
		return err
	}
	d.gpuRes = gpuResource(d.profile, d.cfg)
	return nil
}

// selectTargets picks the containers and, for rdma-exclusive, their counts.
func (d *decision) selectTargets() error {
	var err error
	if d.targets, err = selectContainers(d.pod, d.gpuRes); err != nil {
		return err
	}
	if d.hcas, err = parseHCAs(d.pod); err != nil {
		return err
	}
	if d.mode.Exclusive {
		d.counts, err = exclusiveCounts(d.targets, d.hcas, d.gpuRes, d.profile, d.cfg)
	}
	return err
}

// warnPod warns about settings that do not apply to the mode and about
// containers that see every HCA of the node anyway.
func (d *decision) warnPod() error {
	if d.hcas > 0 && !d.mode.Exclusive {
		d.plan.warn("annotation %s is ignored: it applies to mode %s only", contract.AnnotationHCAs, contract.ModeExclusive)
	}
	if d.failClosed && !d.mode.RDMA() {
		d.plan.warn("socket fallback deny is ignored: mode %s uses no RDMA, so NCCL runs over sockets by design", d.mode.String())
	}
	if d.mode.RDMA() {
		warnWholeHostDevices(d.pod, d.targets, d.plan.warn)
	}
	return nil
}

// decideCapability applies the capability policy: rdma modes want IPC_LOCK
// unless the policy or the namespace's Pod Security level forbids it.
func (d *decision) decideCapability() error {
	d.addCap = d.mode.RDMA()
	if !d.addCap {
		return nil
	}
	switch d.cfg.CapabilityPolicy {
	case config.CapabilityNever:
		d.addCap = false
	case config.CapabilityAuto:
		if lvl := d.ns.Labels[LabelPodSecurityEnforce]; lvl == "baseline" || lvl == "restricted" {
			d.addCap = false
			if missingCap(d.targets) {
				d.plan.warn("IPC_LOCK not added: namespace %q enforces Pod Security %q, which forbids it; "+
					"locked memory for RDMA comes from the node agent (annotation %s)", d.ns.Name, lvl, contract.AnnotationMemlock)
			}
		}
	}
	return nil
}

// decideAnnotations plans the pod annotations ibkube writes where absent:
// the NCCL conf file, memlock, the IPoIB network and the injected status.
func (d *decision) decideAnnotations() error {
	pod, m := d.pod, d.mode
	if _, ok := pod.Annotations[contract.AnnotationNCCLConf]; !ok {
		conf, err := d.conf()
		if err != nil {
			return err
		}
		d.plan.annotations = append(d.plan.annotations, kv{contract.AnnotationNCCLConf, conf})
	}
	if _, ok := pod.Annotations[contract.AnnotationMemlock]; m.RDMA() && !ok {
		d.plan.annotations = append(d.plan.annotations, kv{contract.AnnotationMemlock, d.cfg.Memlock})
	}
	if m.IPoIB {
		if err := d.decideNetwork(); err != nil {
			return err
		}
	}
	if _, ok := pod.Annotations[contract.AnnotationInjected]; !ok {
		d.plan.annotations = append(d.plan.annotations, kv{contract.AnnotationInjected, status(m.String(), d.targets, d.profileName)})
	}
	return nil
}

// conf renders the pod's NCCL conf file.
func (d *decision) conf() (string, error) {
	ifname, err := ipoibInterface(d.pod, d.mode, d.cfg)
	if err != nil {
		return "", err
	}
	return ncclConf(confInput{
		profileName: d.profileName, modeName: d.mode.String(), m: d.mode, profile: d.profile, ifname: ifname,
		wholeNode: holdsWholeNode(d.targets, d.gpuRes, d.profile.GPUsPerNode), failClosed: d.failClosed && d.mode.RDMA(),
	}), nil
}

// decideNetwork appends the IPoIB network to the pod's Multus networks
// unless it is there.
func (d *decision) decideNetwork() error {
	existing := d.pod.Annotations[multus.Annotation]
	net := multus.Network{Namespace: d.cfg.IPoIBNamespace(), Name: d.cfg.IPoIB.Name, Interface: d.cfg.IPoIB.Interface}
	v, changed, err := multus.Merge(existing, []multus.Network{net}, d.pod.Namespace)
	if err != nil {
		return refusef("annotation %s: invalid value %s: %v; accepted: a comma-separated list of [namespace/]name[@interface] or a JSON list of network selection elements",
			multus.Annotation, echo(existing), err)
	}
	if changed {
		d.plan.annotations = append(d.plan.annotations, kv{multus.Annotation, v})
	}
	return nil
}

// decideContainers plans, per selected container, what it lacks.
func (d *decision) decideContainers() error {
	exclusiveRes := d.exclusiveResource()
	for i, t := range d.targets {
		cp := containerPlan{target: t}
		if d.mode.Shared {
			cp.resources = d.needResource(cp.resources, t, d.cfg.Resources.Shared, 1)
		}
		if d.mode.Exclusive && !d.holders[t.path] {
			cp.resources = d.needResource(cp.resources, t, exclusiveRes, d.counts[i])
		}
		if d.addCap && !hasCapability(t.c, "IPC_LOCK") {
			cp.capability = "IPC_LOCK"
		}
		cp.env = d.needEnv(t)
		cp.mount = d.needMount(t)
		d.plan.containers = append(d.plan.containers, cp)
	}
	return nil
}

// needResource adds n of res to list unless the container already asks for
// res, in limits or requests; then its value stays, with a warning when it
// differs.
func (d *decision) needResource(list []resourceAdd, t target, res string, n int64) []resourceAdd {
	r := &t.c.Resources
	name := corev1.ResourceName(res)
	lim, inLim := r.Limits[name]
	req, inReq := r.Requests[name]
	if !inLim && !inReq {
		return append(list, resourceAdd{name: name, count: n})
	}
	have := lim
	if !inLim {
		have = req
	}
	if have.Value() != n {
		d.plan.warn("container %q keeps its own %s: %s (ibkube would have set %d)", t.c.Name, res, have.String(), n)
	}
	return list
}

// needEnv is NCCL_CONF_FILE and the profile's non-NCCL variables where the
// user did not set them in env. With envFrom, whose values an env entry
// would silently override, only NCCL_CONF_FILE is added (see README).
func (d *decision) needEnv(t target) []corev1.EnvVar {
	c := t.c
	add := make([]corev1.EnvVar, 0, 1+len(d.profile.Env))
	if i := envIndex(c, contract.EnvNCCLConfFile); i < 0 {
		add = append(add, corev1.EnvVar{Name: contract.EnvNCCLConfFile, Value: contract.NCCLConfFile})
	} else if e := c.Env[i]; e.Value != contract.NCCLConfFile || e.ValueFrom != nil {
		d.plan.warn("container %q sets %s itself, so NCCL does not read the profile's settings from %s", c.Name, contract.EnvNCCLConfFile, contract.NCCLConfFile)
	}
	var skipped []string
	for _, v := range d.profile.Env {
		if envIndex(c, v.Name) >= 0 {
			continue
		}
		if len(c.EnvFrom) > 0 {
			skipped = append(skipped, v.Name+"="+v.Value)
			continue
		}
		add = append(add, corev1.EnvVar{Name: v.Name, Value: v.Value})
	}
	if len(skipped) > 0 {
		d.plan.warn("container %q uses envFrom, so ibkube did not add %s (an env entry would override a value from envFrom); set them in env if you want them",
			c.Name, strings.Join(skipped, ", "))
	}
	return add
}

// needMount says whether the container lacks the conf volume's mount; one
// that mounts something else there keeps it, with a warning.
func (d *decision) needMount(t target) bool {
	for _, m := range t.c.VolumeMounts {
		if m.Name == contract.NCCLConfVolume && m.MountPath == contract.NCCLConfDir {
			return false
		}
		if m.MountPath == contract.NCCLConfDir || m.Name == contract.NCCLConfVolume {
			d.plan.warn("container %q already mounts %s or volume %s, so NCCL_CONF_FILE may not find the profile's settings", t.c.Name, contract.NCCLConfDir, contract.NCCLConfVolume)
			return false
		}
	}
	return true
}

// decideVolume adds the downwardAPI volume projecting the conf annotation
// when some container mounts it (or will) and the pod does not have it yet.
func (d *decision) decideVolume() error {
	spec := &d.pod.Spec
	for _, v := range spec.Volumes {
		if v.Name == contract.NCCLConfVolume {
			return nil
		}
	}
	d.plan.volume = mountsConf(spec.Containers) || mountsConf(spec.InitContainers)
	for _, cp := range d.plan.containers {
		d.plan.volume = d.plan.volume || cp.mount
	}
	return nil
}
