package mutate

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/ibkube/ibkube/contract"
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

// appendItem appends item to the list at path: the list is added whole
// where the pod has none (JSON Patch cannot append to a missing array),
// else the item is appended with "/-".
func appendItem[T any](p *patcher, list *[]T, path string, item T) {
	if *list == nil {
		*list = []T{item}
		p.add(path, *list)
		return
	}
	*list = append(*list, item)
	p.add(path+"/-", item)
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

// apply makes the plan's changes to the pod, recording each as a patch
// operation: per container its resources, capability, env and mount, then
// the volume, then the annotations.
func apply(pod *corev1.Pod, pl *plan) []PatchOp {
	p := patcher{ops: make([]PatchOp, 0, 8*len(pl.containers)+6)}
	for _, cp := range pl.containers {
		for _, r := range cp.resources {
			p.addResource(cp.target, r)
		}
		if cp.capability != "" {
			p.addCapability(cp.target, cp.capability)
		}
		p.addEnv(cp.target, cp.env)
		if cp.mount {
			p.addMount(cp.target)
		}
	}
	for _, c := range pl.claims {
		p.addAlignedClaim(pod, c)
	}
	if pl.volume {
		p.addVolume(pod)
	}
	if pl.jobAffinity != nil {
		p.addJobAffinity(pod, pl.jobAffinity)
	}
	p.addAnnotations(pod, pl.annotations)
	return p.ops
}

// addResource gives the container r in limits and requests.
func (p *patcher) addResource(t target, r resourceAdd) {
	res := &t.c.Resources
	q := quantity(r.count)
	if res.Limits == nil && res.Requests == nil && res.Claims == nil {
		res.Limits = corev1.ResourceList{r.name: q}
		res.Requests = corev1.ResourceList{r.name: q}
		p.add(t.path+"/resources", corev1.ResourceRequirements{Limits: res.Limits, Requests: res.Requests})
		return
	}
	p.setQuantity(&res.Limits, t.path+"/resources/limits", r.name, q)
	p.setQuantity(&res.Requests, t.path+"/resources/requests", r.name, q)
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

func (p *patcher) addCapability(t target, capName corev1.Capability) {
	c := t.c
	switch {
	case c.SecurityContext == nil:
		c.SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{capName}}}
		p.add(t.path+"/securityContext", c.SecurityContext)
	case c.SecurityContext.Capabilities == nil:
		c.SecurityContext.Capabilities = &corev1.Capabilities{Add: []corev1.Capability{capName}}
		p.add(t.path+"/securityContext/capabilities", c.SecurityContext.Capabilities)
	default:
		appendItem(p, &c.SecurityContext.Capabilities.Add, t.path+"/securityContext/capabilities/add", capName)
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

// addEnv appends add to the container's env.
func (p *patcher) addEnv(t target, add []corev1.EnvVar) {
	c := t.c
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

// addMount mounts the conf volume read-only where NCCL_CONF_FILE points.
func (p *patcher) addMount(t target) {
	c := t.c
	m := corev1.VolumeMount{Name: contract.NCCLConfVolume, MountPath: contract.NCCLConfDir, ReadOnly: true}
	appendItem(p, &c.VolumeMounts, t.path+"/volumeMounts", m)
}

// addVolume adds the downwardAPI volume projecting the conf annotation.
func (p *patcher) addVolume(pod *corev1.Pod) {
	v := corev1.Volume{Name: contract.NCCLConfVolume, VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
		Items: []corev1.DownwardAPIVolumeFile{{
			Path:     contract.NCCLConfFileName,
			FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.annotations['" + contract.AnnotationNCCLConf + "']"},
		}},
	}}}
	appendItem(p, &pod.Spec.Volumes, "/spec/volumes", v)
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
