package dra

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/discovery"
	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/node/resource"
)

// DeviceSlices lists ResourceSlices (resourcev1.ResourceSliceInterface):
// where Prepare reads the places of a claim's GPUs, which another driver
// publishes.
type DeviceSlices interface {
	List(ctx context.Context, opts metav1.ListOptions) (*resourceapi.ResourceSliceList, error)
}

// PodEvents sends Events about pods (the binary builds it from its event
// recorder, which aggregates repeats and limits each object's rate).
type PodEvents interface {
	PodEvent(pod PodRef, eventType, reason, message string)
}

// PodRef names a pod a claim is reserved for.
type PodRef struct {
	Namespace, Name string
	UID             types.UID
}

// gpuLookupTimeout bounds the reads of a claim's GPU slices: Prepare runs
// inside the kubelet's call, and the report is not worth holding a pod's
// start.
const gpuLookupTimeout = 2 * time.Second

// reportPairs adds the claim's GPU+HCA pairs and its HCAs' GPU partners
// to every device of its CDI spec (contract.EnvGPUPairs, EnvGPUPartners)
// and returns the pairs.
func (d *Driver) reportPairs(ctx context.Context, reqs []Request, results []resourceapi.DeviceRequestAllocationResult, spec *cdispec.Spec) []Pair {
	hcas := claimHCAs(reqs)
	pairs := claimPairs(hcas, d.claimGPUs(ctx, results))
	env := pairEnv(hcas, pairs)
	for i := range spec.Devices {
		spec.Devices[i].ContainerEdits.Env = append(spec.Devices[i].ContainerEdits.Env, env...)
	}
	return pairs
}

// claimHCAs are the HCAs of the claim's requests with their places, as
// discovery read them into the inventory.
func claimHCAs(reqs []Request) []claimHCA {
	var out []claimHCA
	for _, r := range reqs {
		for _, dev := range r.Devices {
			h := dev.HCA
			out = append(out, claimHCA{request: r.Name, place: hcaPlace{
				name: h.Name, root: h.PCIeRoot, numa: h.NUMANode, partner: h.GPUPartner,
			}})
		}
	}
	return out
}

// claimGPUs are the claim's devices of other drivers with their places,
// read from their drivers' slices of this node (one list per driver). A
// device whose slice cannot be read keeps its name and an unknown place.
func (d *Driver) claimGPUs(ctx context.Context, results []resourceapi.DeviceRequestAllocationResult) []claimGPU {
	var out []claimGPU
	listed := map[string][]resourceapi.ResourceSlice{}
	ctx, cancel := context.WithTimeout(ctx, gpuLookupTimeout)
	defer cancel()
	for _, r := range results {
		if r.Driver == contract.DRADriverName {
			continue
		}
		got, ok := listed[r.Driver]
		if !ok {
			var err error
			got, err = d.driverSlices(ctx, r.Driver)
			if err != nil {
				d.log.V(1).Info("GPU places unknown; the claim's pairs say so", "driver", r.Driver, "reason", err.Error())
			}
			listed[r.Driver] = got
		}
		out = append(out, claimGPU{request: r.Request, place: d.gpuPlace(deviceAttributes(got, r.Pool, r.Device), r.Device)})
	}
	return out
}

// driverSlices lists driver's ResourceSlices of this node.
func (d *Driver) driverSlices(ctx context.Context, driver string) ([]resourceapi.ResourceSlice, error) {
	if d.cfg.Slices == nil {
		return nil, fmt.Errorf("no ResourceSlice client")
	}
	sel := fields.AndSelectors(
		fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorNodeName, d.cfg.NodeName),
		fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorDriver, driver),
	)
	list, err := d.cfg.Slices.List(ctx, metav1.ListOptions{FieldSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("list ResourceSlices of driver %s on node %s: %w", driver, d.cfg.NodeName, err)
	}
	return list.Items, nil
}

// deviceAttributes are the attributes of device in pool among slices, from
// the pool's newest generation; nil when it is not there.
func deviceAttributes(slices []resourceapi.ResourceSlice, pool, device string) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	var out map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
	gen := int64(-1)
	for _, s := range slices {
		if s.Spec.Pool.Name != pool || s.Spec.Pool.Generation <= gen {
			continue
		}
		for _, dev := range s.Spec.Devices {
			if dev.Name == device {
				out, gen = dev.Attributes, s.Spec.Pool.Generation
			}
		}
	}
	return out
}

// gpuPlace is where a GPU with attrs sits: by the node's own PCI tree
// where its driver publishes its PCI address (the same reading as the
// HCAs'), else by the pcieRoot and numaNode it publishes.
func (d *Driver) gpuPlace(attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, device string) gpuPlace {
	p := gpuPlace{id: device, numa: inventory.UnknownNUMANode}
	if a, ok := attrs[deviceattribute.StandardDeviceAttributePCIeRoot]; ok && a.StringValue != nil {
		p.root = *a.StringValue
	}
	if a, ok := attrs[deviceattribute.StandardDeviceAttributeNUMANode]; ok && a.IntValue != nil {
		p.numa = int(*a.IntValue)
	}
	a, ok := attrs[deviceattribute.StandardDeviceAttributePCIBusID]
	if !ok || a.StringValue == nil {
		return p
	}
	p.id = *a.StringValue
	addr, ok := sysfsPCIAddress(p.id)
	if !ok {
		return p
	}
	if d.cfg.PCIeRoot != nil {
		if root, err := d.cfg.PCIeRoot(addr); err == nil {
			p.root = root
		}
	}
	if d.cfg.NUMANode != nil {
		if numa, err := d.cfg.NUMANode(addr); err == nil {
			p.numa = numa
		}
	}
	return p
}

// pciAddressPattern is a PCI address as sysfs names devices
// (domain:bus:device.function), in either case.
var pciAddressPattern = regexp.MustCompile(`^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$`)

// sysfsPCIAddress is address as sysfs names it (lower case); ok is false
// for anything else, which never becomes part of a path.
func sysfsPCIAddress(address string) (string, bool) {
	if !pciAddressPattern.MatchString(address) {
		return "", false
	}
	return strings.ToLower(address), true
}

// NUMANode is the NUMA node of the PCI device at address under sysfsRoot
// (discovery.NUMANode), for devices of other drivers: an address not of
// the PCI form is refused before it becomes part of a path.
func NUMANode(sysfsRoot, address string) (int, error) {
	if _, ok := sysfsPCIAddress(address); !ok {
		return 0, fmt.Errorf("PCI address %q: want domain:bus:device.function in hex (0000:0f:00.0)", address)
	}
	return discovery.NUMANode(sysfsRoot, address)
}

// alignmentEvent sends each pod the claim is reserved for a Warning Event
// when pairs of its aligned claim took a lower rung than the node's
// topology offers.
func (d *Driver) alignmentEvent(m *resource.Model, c *resourceapi.ResourceClaim, pairs []Pair) {
	if d.cfg.PodEvents == nil {
		return
	}
	hcas := make([]inventory.HCA, 0, len(m.HCAs))
	for _, s := range m.HCAs {
		hcas = append(hcas, s.HCA)
	}
	msg, ok := fallback(claimRef(c), pairs, nodeBestRung(hcas))
	if !ok {
		return
	}
	for _, r := range c.Status.ReservedFor {
		if r.Resource == "pods" && r.APIGroup == "" {
			d.cfg.PodEvents.PodEvent(PodRef{Namespace: c.Namespace, Name: r.Name, UID: r.UID}, corev1.EventTypeWarning, ReasonGPUAlignmentFellBack, msg)
		}
	}
}
