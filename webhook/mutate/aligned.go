package mutate

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/webhook/aligned"
	"github.com/ibkube/ibkube/webhook/config"
)

// alignedClaim is one aligned GPU+HCA claim the pod gets: the container
// that holds it, the claim's name in the pod, the ResourceClaimTemplate it
// is made from and the extended resources it replaces in the container.
type alignedClaim struct {
	target
	name     string
	template string
	drop     []corev1.ResourceName
}

// decideAligned plans, with alignedClaims on, the aligned claim of each
// selected rdma-exclusive container that asks for GPUs: its GPU and RDMA
// extended resources go, and a pod-level claim from the shape's template
// (kept in the namespace by the webhook's template controller) takes their
// place. Each asking container gets a claim of its own: a claim shared by
// two containers would give both every device of it, where their extended
// resources gave each its own.
//
// The pod keeps its extended resources, with a warning saying why, when it
// already carries claims of its own (ibkube does not rewrite a DRA pod the
// user wrote) or when a container's shape is beyond one claim's bounds;
// then no container of the pod is aligned, so its GPUs come one way.
func (d *decision) decideAligned() error {
	if !d.cfg.AlignedClaims.Enabled || !d.mode.Exclusive {
		return nil
	}
	if d.holders = heldAlignedClaims(d.pod, d.targets); len(d.holders) > 0 {
		return nil // admitted before: the claims are in place
	}
	asking := d.askingGPUs()
	if len(asking) == 0 {
		return nil
	}
	if d.gpuRes != d.cfg.GPUResource {
		d.plan.warn("the pod's GPUs and HCAs stay on %s and %s, not on an aligned claim: profile %s counts GPUs by %s, and alignedClaims.gpuDeviceClass %s serves %s",
			d.gpuRes, d.exclusiveResource(), d.profileName, d.gpuRes, d.cfg.AlignedClaims.GPUDeviceClass, d.cfg.GPUResource)
		return nil
	}
	if rc := d.pod.Spec.ResourceClaims; len(rc) > 0 {
		d.plan.warn("the pod's GPUs and HCAs stay on %s and %s, not on an aligned claim: the pod has resourceClaims of its own (%s), which ibkube leaves as written; "+
			"to keep its HCAs beside its GPUs, pair them in one claim yourself (docs/dra.md, \"Aligned GPU and HCA pairs\")",
			d.gpuRes, d.exclusiveResource(), bound(claimNames(rc), maxEcho))
		return nil
	}
	claims := make([]alignedClaim, 0, len(asking))
	for _, i := range asking {
		c, why := d.alignedClaimOf(i, len(asking) > 1)
		if why != "" {
			d.plan.warn("the pod's GPUs and HCAs stay on %s and %s, not on an aligned claim: %s", d.gpuRes, d.exclusiveResource(), why)
			return nil
		}
		claims = append(claims, c)
	}
	d.plan.claims = claims
	d.holders = make(map[string]bool, len(claims))
	for _, c := range claims {
		d.holders[c.path] = true
	}
	return nil
}

// askingGPUs are the indices of the selected containers that ask for GPUs.
func (d *decision) askingGPUs() []int {
	var out []int
	for i, t := range d.targets {
		if gpuCount(t.c, d.gpuRes) > 0 {
			out = append(out, i)
		}
	}
	return out
}

// alignedClaimOf is the claim of selected container i; why says, when it
// gets none, what stands in the way. named gives the claim the container's
// name, for pods with several asking containers.
func (d *decision) alignedClaimOf(i int, named bool) (alignedClaim, string) {
	t := d.targets[i]
	res := d.exclusiveResource()
	hcas := d.counts[i]
	if own, ok := quantityOf(t.c, corev1.ResourceName(res)); ok {
		hcas = own // the container's own count stays what it asks
	}
	shape := aligned.Shape{
		GPUs: int(gpuCount(t.c, d.gpuRes)), HCAs: int(hcas),
		GPUClass: d.cfg.AlignedClaims.GPUDeviceClass, HCAClass: contract.DeviceClassFor(res),
	}
	if err := shape.Validate(); err != nil {
		return alignedClaim{}, "container " + echo(t.c.Name) + ": " + err.Error()
	}
	if !kept(d.cfg, shape) {
		return alignedClaim{}, fmt.Sprintf("container %s: no ResourceClaimTemplate is kept for %d GPUs and %d HCAs of %s; "+
			"accepted: 1 to a profile's gpusPerNode GPUs with its hcasPerGPU HCAs each, GPUs counted by %s (docs/dra.md, \"Aligned GPU and HCA pairs\")",
			echo(t.c.Name), shape.GPUs, shape.HCAs, shape.HCAClass, d.cfg.GPUResource)
	}
	name := contract.AlignedClaim
	if named {
		name += "-" + t.c.Name
	}
	if msgs := validation.IsDNS1123Label(name); len(msgs) > 0 {
		return alignedClaim{}, "container " + echo(t.c.Name) + ": its claim's name " + echo(name) + " is no DNS-1123 label (at most 63 characters); a shorter container name fits"
	}
	c := alignedClaim{target: t, name: name, template: shape.Name()}
	for _, r := range []corev1.ResourceName{corev1.ResourceName(d.gpuRes), corev1.ResourceName(res)} {
		if _, ok := quantityOf(t.c, r); ok {
			c.drop = append(c.drop, r)
		}
	}
	return c, ""
}

// exclusiveResource is the rdma-exclusive resource of the pod's profile.
func (d *decision) exclusiveResource() string {
	if d.profile.ExclusiveResource != "" {
		return d.profile.ExclusiveResource
	}
	return d.cfg.Resources.Exclusive
}

// heldAlignedClaims are the paths of the selected containers that already
// hold an aligned claim of the pod: a pod admitted before, whose GPUs and
// HCAs the claim serves.
func heldAlignedClaims(pod *corev1.Pod, targets []target) map[string]bool {
	own := map[string]bool{}
	for _, rc := range pod.Spec.ResourceClaims {
		if isAlignedClaim(rc.Name) {
			own[rc.Name] = true
		}
	}
	if len(own) == 0 {
		return nil
	}
	held := map[string]bool{}
	for _, t := range targets {
		if holdsClaim(t.c, own) {
			held[t.path] = true
		}
	}
	return held
}

func isAlignedClaim(name string) bool {
	return name == contract.AlignedClaim || strings.HasPrefix(name, contract.AlignedClaim+"-")
}

func holdsClaim(c *corev1.Container, names map[string]bool) bool {
	for _, rc := range c.Resources.Claims {
		if names[rc.Name] {
			return true
		}
	}
	return false
}

// holdsAlignedClaim says whether the container holds an aligned claim: it
// stands for a GPU container once admission moved its GPUs into the claim.
func holdsAlignedClaim(c *corev1.Container) bool {
	for _, rc := range c.Resources.Claims {
		if isAlignedClaim(rc.Name) {
			return true
		}
	}
	return false
}

func claimNames(rc []corev1.PodResourceClaim) string {
	names := make([]string, len(rc))
	for i, c := range rc {
		names[i] = c.Name
	}
	return strings.Join(names, ", ")
}

// quantityOf is the container's count of r, from limits else requests.
func quantityOf(c *corev1.Container, r corev1.ResourceName) (int64, bool) {
	if q, ok := c.Resources.Limits[r]; ok {
		return q.Value(), true
	}
	if q, ok := c.Resources.Requests[r]; ok {
		return q.Value(), true
	}
	return 0, false
}

// addAlignedClaim moves the container's GPUs and HCAs into the claim: the
// replaced resources leave limits and requests (a list left empty goes
// whole, as the API server would not keep it), the container names the
// claim, and the pod gets it from its template.
func (p *patcher) addAlignedClaim(pod *corev1.Pod, c alignedClaim) {
	res := &c.c.Resources
	for _, r := range c.drop {
		p.removeQuantity(&res.Limits, c.path+"/resources/limits", r)
		p.removeQuantity(&res.Requests, c.path+"/resources/requests", r)
	}
	ref := corev1.ResourceClaim{Name: c.name}
	appendItem(p, &res.Claims, c.path+"/resources/claims", ref)
	appendItem(p, &pod.Spec.ResourceClaims, "/spec/resourceClaims", corev1.PodResourceClaim{Name: c.name, ResourceClaimTemplateName: &c.template})
}

// removeQuantity removes name from the list at path, the whole list when
// it was the last entry.
func (p *patcher) removeQuantity(list *corev1.ResourceList, path string, name corev1.ResourceName) {
	if _, ok := (*list)[name]; !ok {
		return
	}
	if len(*list) == 1 {
		*list = nil
		p.ops = append(p.ops, PatchOp{Op: "remove", Path: path})
		return
	}
	delete(*list, name)
	p.ops = append(p.ops, PatchOp{Op: "remove", Path: path + "/" + escape(string(name))})
}

// AlignedShapes are the shapes whose ResourceClaimTemplates the webhook's
// controller keeps in each opted-in namespace, and so the only ones a pod
// is aligned to (none with alignedClaims off): for each profile whose GPUs
// the configured GPU DeviceClass serves, 1 to its gpusPerNode GPUs (a
// profile that states none: the most any profile states) with its HCAs
// per GPU each, on the DeviceClass of its rdma-exclusive pool. Shapes
// beyond one claim's bounds are left out. Sorted by name, each once.
func AlignedShapes(cfg *config.Config) []aligned.Shape {
	seen := map[string]aligned.Shape{}
	for _, k := range keptShapes(cfg) {
		for g := 1; g <= k.gpus; g++ {
			s := k.shape(g, cfg)
			if s.Validate() == nil {
				seen[s.Name()] = s
			}
		}
	}
	out := make([]aligned.Shape, 0, len(seen))
	for _, name := range slices.Sorted(maps.Keys(seen)) {
		out = append(out, seen[name])
	}
	return out
}

// kept says whether AlignedShapes holds s, without building it: admission
// asks it for every aligned pod.
func kept(cfg *config.Config, s aligned.Shape) bool {
	if s.Validate() != nil || s.GPUClass != cfg.AlignedClaims.GPUDeviceClass {
		return false
	}
	for _, k := range keptShapes(cfg) {
		if s.GPUs <= k.gpus && k.shape(s.GPUs, cfg) == s {
			return true
		}
	}
	return false
}

// profileShapes are one profile's kept shapes: 1 to gpus GPUs, perGPU
// HCAs each, on class.
type profileShapes struct {
	gpus, perGPU int
	class        string
}

func (k profileShapes) shape(gpus int, cfg *config.Config) aligned.Shape {
	return aligned.Shape{GPUs: gpus, HCAs: gpus * k.perGPU, GPUClass: cfg.AlignedClaims.GPUDeviceClass, HCAClass: k.class}
}

// keptShapes is the rule of AlignedShapes, per profile.
func keptShapes(cfg *config.Config) []profileShapes {
	if !cfg.AlignedClaims.Enabled {
		return nil
	}
	names := cfg.ProfileNames()
	most := 0
	for _, name := range names {
		p, _ := cfg.Profile(name)
		most = max(most, p.GPUsPerNode)
	}
	out := make([]profileShapes, 0, len(names))
	for _, name := range names {
		p, _ := cfg.Profile(name)
		if gpuResource(p, cfg) != cfg.GPUResource {
			continue
		}
		out = append(out, profileShapes{
			gpus: cmp.Or(p.GPUsPerNode, most), perGPU: max(1, p.HCAsPerGPU),
			class: contract.DeviceClassFor(cmp.Or(p.ExclusiveResource, cfg.Resources.Exclusive)),
		})
	}
	return out
}
