// Package aligned builds the ResourceClaim that keeps a pod's HCAs next to
// its GPUs under DRA: from the pod's counts it makes one claim in which
// every GPU is paired with its share of the HCAs, and each GPU comes from
// the first rung of a ladder the node can give: one on the PCIe root of
// its HCAs, else on their NUMA node, else anywhere (docs/dra.md, "Aligned
// GPU and HCA pairs"). It is pure: no client, no clock.
package aligned

import (
	"fmt"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/utils/ptr"

	"github.com/ibkube/ibkube/contract"
)

// The rungs of each pair's GPU request, best first. A result's request
// names the rung it was allocated for: "gpu-0/pcie-root".
// The names are the contract's, which the node agent reads back from the
// allocation results (contract.AlignedRungOf, AlignedPairOf).
const (
	RungPCIeRoot = contract.RungPCIeRoot
	RungNUMANode = contract.RungNUMANode
	RungAny      = contract.RungAny
)

// MaxHCAs is the most HCAs one aligned claim pairs: each takes two of the
// claim's 32 constraints (resourceapi.DeviceConstraintsMaxSize).
const MaxHCAs = resourceapi.DeviceConstraintsMaxSize / 2

// Shape is what a pod asks: its GPU and HCA counts and the DeviceClasses
// that serve them.
type Shape struct {
	GPUs int
	HCAs int
	// GPUClass is the GPU driver's DeviceClass ("gpu.nvidia.com").
	GPUClass string
	// HCAClass is ibkube's DeviceClass of the pod's RDMA resource
	// (contract.DeviceClassIB for rdma/ib).
	HCAClass string
}

// Validate says what is wrong with a shape, naming what is accepted.
func (s Shape) Validate() error {
	switch {
	case s.GPUs < 1:
		return fmt.Errorf("aligned claim: %d GPUs; accepted: at least 1", s.GPUs)
	case s.HCAs < 1 || s.HCAs > MaxHCAs:
		return fmt.Errorf("aligned claim: %d HCAs; accepted: 1 to %d (two constraints per HCA, %d per claim)", s.HCAs, MaxHCAs, resourceapi.DeviceConstraintsMaxSize)
	case s.GPUs+s.HCAs > resourceapi.AllocationResultsMaxSize:
		return fmt.Errorf("aligned claim: %d GPUs and %d HCAs are %d devices; accepted: at most %d in one claim", s.GPUs, s.HCAs, s.GPUs+s.HCAs, resourceapi.AllocationResultsMaxSize)
	case s.GPUClass == "" || s.HCAClass == "":
		return fmt.Errorf("aligned claim: GPU class %q, HCA class %q; accepted: both DeviceClass names set", s.GPUClass, s.HCAClass)
	}
	return nil
}

// Name is the ResourceClaimTemplate's name for the shape: one template per
// shape and class, so pods of one shape share it.
func (s Shape) Name() string {
	return fmt.Sprintf("ibkube-aligned-%dgpu-%dhca-%s", s.GPUs, s.HCAs, s.HCAClass)
}

// pair is one GPU and the HCAs that go with it.
type pair struct {
	index int
	hcas  int
}

// pairs spreads the HCAs over the GPUs, the first GPUs taking one more
// when they do not divide evenly; GPUs beyond the HCAs get none.
func (s Shape) pairs() []pair {
	n := min(s.GPUs, s.HCAs)
	out := make([]pair, n)
	for i := range out {
		out[i] = pair{index: i, hcas: s.HCAs / n}
		if i < s.HCAs%n {
			out[i].hcas++
		}
	}
	return out
}

// GPURequest names pair's GPU request; its rungs are GPURequest/Rung*.
func GPURequest(pair int) string { return "gpu-" + strconv.Itoa(pair) }

// HCARequest names the j-th HCA of pair.
func HCARequest(pair, j int) string { return fmt.Sprintf("hca-%d-%d", pair, j) }

// UnpairedGPUs names the request for the GPUs left without an HCA when a
// pod asks fewer HCAs than GPUs.
const UnpairedGPUs = "gpus-unpaired"

// Spec is the claim for the shape. Each pair is a GPU request with the
// three rungs as firstAvailable subrequests, then one request per HCA;
// each HCA is joined by a pcieRoot constraint to the GPU's first rung and
// by a numaNode one to its second.
//
// The ladder is on the GPU, and the GPU comes first, for two reasons in
// the scheduler's allocator (k8s.io/dynamic-resource-allocation
// structured): a constraint naming a plain request binds every device of
// it whatever rung its partner took, and a device without the attribute
// fails the constraint. With the rungs on the GPU, a GPU driver that
// publishes no pcieRoot or numaNode (NVIDIA's publishes no numaNode; an
// Azure VM's GPUs share no root with an HCA) only skips a rung, while the
// HCAs, whose attributes ibkube publishes, carry both. And the allocator
// searches requests in order, trying a rung with every free device and
// the rest of the claim before the next rung: with the GPU first, the
// first rung is tried with every free GPU and the HCAs on its root, so a
// GPU whose own HCAs are taken does not push the pair down the ladder
// while another GPU has free ones.
//
// The pairs are interleaved (a GPU, its HCAs, the next GPU) rather than
// every GPU first, though a node with too few free GPUs would then fail
// at the GPUs before any HCA is tried: the allocator backtracks to its
// latest choice, so with every GPU first a GPU whose HCAs are taken is
// found out only after every choice of the later GPUs, which on a busy
// node costs a fitting pod hundreds of times more (docs/dra.md, "Cost").
func Spec(s Shape) (resourceapi.ResourceClaimSpec, error) {
	if err := s.Validate(); err != nil {
		return resourceapi.ResourceClaimSpec{}, err
	}
	var d resourceapi.DeviceClaim
	for _, p := range s.pairs() {
		gpu := GPURequest(p.index)
		d.Requests = append(d.Requests, gpuLadder(gpu, s.GPUClass))
		for j := range p.hcas {
			hca := HCARequest(p.index, j)
			d.Requests = append(d.Requests, exactly(hca, s.HCAClass, 1))
			d.Constraints = append(d.Constraints,
				match(deviceattribute.StandardDeviceAttributePCIeRoot, gpu+"/"+RungPCIeRoot, hca),
				match(deviceattribute.StandardDeviceAttributeNUMANode, gpu+"/"+RungNUMANode, hca),
			)
		}
	}
	if rest := s.GPUs - s.HCAs; rest > 0 {
		d.Requests = append(d.Requests, exactly(UnpairedGPUs, s.GPUClass, rest))
	}
	return resourceapi.ResourceClaimSpec{Devices: d}, nil
}

// Template is the ResourceClaimTemplate of the shape, named by Shape.Name.
func Template(s Shape, namespace string) (*resourceapi.ResourceClaimTemplate, error) {
	spec, err := Spec(s)
	if err != nil {
		return nil, err
	}
	t := &resourceapi.ResourceClaimTemplate{Spec: resourceapi.ResourceClaimTemplateSpec{Spec: spec}}
	t.APIVersion, t.Kind = resourceapi.SchemeGroupVersion.String(), "ResourceClaimTemplate"
	t.Name, t.Namespace = s.Name(), namespace
	return t, nil
}

func gpuLadder(name, class string) resourceapi.DeviceRequest {
	rung := func(rung string) resourceapi.DeviceSubRequest {
		return resourceapi.DeviceSubRequest{
			Name: rung, DeviceClassName: class,
			AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
		}
	}
	return resourceapi.DeviceRequest{
		Name:           name,
		FirstAvailable: []resourceapi.DeviceSubRequest{rung(RungPCIeRoot), rung(RungNUMANode), rung(RungAny)},
	}
}

func exactly(name, class string, count int) resourceapi.DeviceRequest {
	return resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(count),
	}}
}

func match(attr resourceapi.QualifiedName, requests ...string) resourceapi.DeviceConstraint {
	return resourceapi.DeviceConstraint{Requests: requests, MatchAttribute: ptr.To(resourceapi.FullyQualifiedName(attr))}
}
