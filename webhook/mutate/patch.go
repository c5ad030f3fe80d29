package mutate

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/nccl"
)

// target is one selected container and where it sits in the pod JSON.
type target struct {
	c    *corev1.Container
	path string // e.g. /spec/containers/0
}

// regularTarget and initTarget are container i of the pod's containers and
// initContainers. With the ops below, they are the only places that know
// the pod's JSON layout.
func regularTarget(spec *corev1.PodSpec, i int) target {
	return target{&spec.Containers[i], "/spec/containers/" + strconv.Itoa(i)}
}

func initTarget(spec *corev1.PodSpec, i int) target {
	return target{&spec.InitContainers[i], "/spec/initContainers/" + strconv.Itoa(i)}
}

// patcher changes the pod in place and records, for each change, the JSON
// Patch operation that makes the same change to the original pod's JSON: a
// missing map or list is added whole, a list is appended to with "/-".
type patcher struct {
	ops []PatchOp
}

func (p *patcher) add(path string, v any) {
	p.ops = append(p.ops, PatchOp{Op: "add", Path: path, Value: v})
}

// escape makes s a JSON Pointer reference token (RFC 6901).
func escape(s string) string {
	switch s { // the keys written on every admission, without allocating
	case contract.AnnotationNCCLConf:
		return "infiniband.azure.com~1nccl-conf"
	case contract.AnnotationMemlock:
		return "infiniband.azure.com~1memlock"
	case contract.AnnotationInjected:
		return "infiniband.azure.com~1injected"
	case "k8s.v1.cni.cncf.io/networks":
		return "k8s.v1.cni.cncf.io~1networks"
	}
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func (p *patcher) addAnnotations(pod *corev1.Pod, annos []kv) {
	if len(annos) == 0 {
		return
	}
	if pod.Annotations == nil {
		m := make(map[string]string, len(annos))
		for _, a := range annos {
			m[a.k] = a.v
		}
		pod.Annotations = m
		p.add("/metadata/annotations", m)
		return
	}
	for _, a := range annos {
		op := "add"
		if _, ok := pod.Annotations[a.k]; ok {
			op = "replace"
		}
		pod.Annotations[a.k] = a.v
		p.ops = append(p.ops, PatchOp{Op: op, Path: "/metadata/annotations/" + escape(a.k), Value: a.v})
	}
}

// ensureResource gives the container n of res in limits and requests,
// unless the user already asked for res in either.
func (p *patcher) ensureResource(t target, res string, n int64, warn func(string, ...any)) {
	r := &t.c.Resources
	name := corev1.ResourceName(res)
	lim, inLim := r.Limits[name]
	req, inReq := r.Requests[name]
	if inLim || inReq {
		have := lim
		if !inLim {
			have = req
		}
		if have.Value() != n {
			warn("container %q keeps its own %s: %s (ibkube would have set %d)", t.c.Name, res, have.String(), n)
		}
		return
	}
	q := quantity(n)
	if r.Limits == nil && r.Requests == nil && r.Claims == nil {
		r.Limits = corev1.ResourceList{name: q}
		r.Requests = corev1.ResourceList{name: q}
		p.add(t.path+"/resources", corev1.ResourceRequirements{Limits: r.Limits, Requests: r.Requests})
		return
	}
	p.setQuantity(&r.Limits, t.path+"/resources/limits", name, q)
	p.setQuantity(&r.Requests, t.path+"/resources/requests", name, q)
}

// setQuantity sets name to q in the resource list at path: one op for the
// whole list when the container has none, else one for the entry.
func (p *patcher) setQuantity(list *corev1.ResourceList, path string, name corev1.ResourceName, q resource.Quantity) {
	if *list == nil {
		*list = corev1.ResourceList{name: q}
		p.add(path, *list)
		return
	}
	(*list)[name] = q
	p.add(path+"/"+escape(string(name)), q)
}

func (p *patcher) ensureCapability(t target, capName corev1.Capability) {
	c := t.c
	if hasCapability(c, capName) {
		return
	}
	switch {
	case c.SecurityContext == nil:
		c.SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{capName}}}
		p.add(t.path+"/securityContext", c.SecurityContext)
	case c.SecurityContext.Capabilities == nil:
		c.SecurityContext.Capabilities = &corev1.Capabilities{Add: []corev1.Capability{capName}}
		p.add(t.path+"/securityContext/capabilities", c.SecurityContext.Capabilities)
	case c.SecurityContext.Capabilities.Add == nil:
		c.SecurityContext.Capabilities.Add = []corev1.Capability{capName}
		p.add(t.path+"/securityContext/capabilities/add", c.SecurityContext.Capabilities.Add)
	default:
		c.SecurityContext.Capabilities.Add = append(c.SecurityContext.Capabilities.Add, capName)
		p.add(t.path+"/securityContext/capabilities/add/-", capName)
	}
}

func envIndex(c *corev1.Container, name string) int {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return i
		}
	}
	return -1
}

// ensureEnv adds NCCL_CONF_FILE and the profile's non-NCCL variables where
// the user did not set them in env. With envFrom, whose values an env entry
// would silently override, only NCCL_CONF_FILE is added (see README).
func (p *patcher) ensureEnv(t target, profile nccl.Profile, warn func(string, ...any)) {
	c := t.c
	add := make([]corev1.EnvVar, 0, 1+len(profile.Env))
	if i := envIndex(c, contract.EnvNCCLConfFile); i < 0 {
		add = append(add, corev1.EnvVar{Name: contract.EnvNCCLConfFile, Value: contract.NCCLConfFile})
	} else if e := c.Env[i]; e.Value != contract.NCCLConfFile || e.ValueFrom != nil {
		warn("container %q sets %s itself, so NCCL does not read the profile's settings from %s", c.Name, contract.EnvNCCLConfFile, contract.NCCLConfFile)
	}
	var skipped []string
	for _, v := range profile.Env {
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
		warn("container %q uses envFrom, so ibkube did not add %s (an env entry would override a value from envFrom); set them in env if you want them",
			c.Name, strings.Join(skipped, ", "))
	}
	if len(add) == 0 {
		return
	}
	if c.Env == nil {
		c.Env = add
		p.add(t.path+"/env", add)
		return
	}
	for _, e := range add {
		c.Env = append(c.Env, e)
		p.add(t.path+"/env/-", e)
	}
}

func (p *patcher) ensureMount(t target, warn func(string, ...any)) {
	c := t.c
	for _, m := range c.VolumeMounts {
		if m.Name == contract.NCCLConfVolume && m.MountPath == contract.NCCLConfDir {
			return
		}
		if m.MountPath == contract.NCCLConfDir || m.Name == contract.NCCLConfVolume {
			warn("container %q already mounts %s or volume %s, so NCCL_CONF_FILE may not find the profile's settings", c.Name, contract.NCCLConfDir, contract.NCCLConfVolume)
			return
		}
	}
	m := corev1.VolumeMount{Name: contract.NCCLConfVolume, MountPath: contract.NCCLConfDir, ReadOnly: true}
	if c.VolumeMounts == nil {
		c.VolumeMounts = []corev1.VolumeMount{m}
		p.add(t.path+"/volumeMounts", c.VolumeMounts)
		return
	}
	c.VolumeMounts = append(c.VolumeMounts, m)
	p.add(t.path+"/volumeMounts/-", m)
}

// ensureVolume adds the downwardAPI volume projecting the conf annotation,
// if some container mounts it and the pod does not have it yet.
func (p *patcher) ensureVolume(pod *corev1.Pod) {
	for _, v := range pod.Spec.Volumes {
		if v.Name == contract.NCCLConfVolume {
			return
		}
	}
	if !mountsConf(pod.Spec.Containers) && !mountsConf(pod.Spec.InitContainers) {
		return
	}
	v := corev1.Volume{Name: contract.NCCLConfVolume, VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
		Items: []corev1.DownwardAPIVolumeFile{{
			Path:     contract.NCCLConfFileName,
			FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.annotations['" + contract.AnnotationNCCLConf + "']"},
		}},
	}}}
	if pod.Spec.Volumes == nil {
		pod.Spec.Volumes = []corev1.Volume{v}
		p.add("/spec/volumes", pod.Spec.Volumes)
		return
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, v)
	p.add("/spec/volumes/-", v)
}

func mountsConf(cs []corev1.Container) bool {
	for i := range cs {
		for _, m := range cs[i].VolumeMounts {
			if m.Name == contract.NCCLConfVolume {
				return true
			}
		}
	}
	return false
}
