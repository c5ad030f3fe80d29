// Package aligned builds the ResourceClaim that keeps a pod's HCAs next to
// its GPUs under DRA: from the pod's counts it makes one claim in which
// every GPU is paired with its share of the HCAs, and each pair's HCAs come
// from the first rung of a ladder the node can give: the GPU's PCIe root,
// else its NUMA node, else anywhere (docs/dra.md, "Aligned GPU and HCA
// pairs"). It is pure: no client, no clock.
package aligned

import (
	"fmt"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/utils/ptr"
)

// The rungs of each pair's HCA request, best first. A result's request
// names the rung it was allocated for: "hcas-0/pcie-root".
const (
	RungPCIeRoot = "pcie-root"
	RungNUMANode = "numa-node"
	RungAny      = "any"
)

// MaxGPUs is the most GPUs one aligned claim pairs: each pair takes two of
// the claim's 32 constraints (resourceapi.DeviceConstraintsMaxSize).
const MaxGPUs = resourceapi.DeviceConstraintsMaxSize / 2

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
	case s.GPUs < 1 || s.GPUs > MaxGPUs:
		return fmt.Errorf("aligned claim: %d GPUs; accepted: 1 to %d (two constraints per GPU, %d per claim)", s.GPUs, MaxGPUs, resourceapi.DeviceConstraintsMaxSize)
	case s.HCAs < 1:
		return fmt.Errorf("aligned claim: %d HCAs; accepted: at least 1", s.HCAs)
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

// GPURequest and HCARequest name a pair's requests in the claim.
func GPURequest(pair int) string { return "gpu-" + strconv.Itoa(pair) }

// HCARequest names pair's HCA request; its rungs are HCARequest/Rung*.
func HCARequest(pair int) string { return "hcas-" + strconv.Itoa(pair) }

// UnpairedGPUs names the request for the GPUs left without an HCA when a
// pod asks fewer HCAs than GPUs.
const UnpairedGPUs = "gpus-unpaired"

// Spec is the claim for the shape. Each pair is an HCA request with the
// three rungs as firstAvailable subrequests, then the GPU request; a
// pcieRoot constraint joins the GPU with the first rung and a numaNode one
// with the second. The HCAs come first because the scheduler's allocator
// searches requests in order and tries a rung with every device before
// the next rung: with the HCAs first, a pair's first rung is tried with
// every free HCA and the GPU that matches it, so a GPU whose own HCAs are
// taken does not push the pair down the ladder while another GPU has a
// free one.
func Spec(s Shape) (resourceapi.ResourceClaimSpec, error) {
	if err := s.Validate(); err != nil {
		return resourceapi.ResourceClaimSpec{}, err
	}
	var d resourceapi.DeviceClaim
	for _, p := range s.pairs() {
		d.Requests = append(d.Requests, hcaRequest(s.HCAClass, p), gpuRequest(GPURequest(p.index), s.GPUClass, 1))
		d.Constraints = append(d.Constraints,
			match(deviceattribute.StandardDeviceAttributePCIeRoot, GPURequest(p.index), HCARequest(p.index)+"/"+RungPCIeRoot),
			match(deviceattribute.StandardDeviceAttributeNUMANode, GPURequest(p.index), HCARequest(p.index)+"/"+RungNUMANode),
		)
	}
	if rest := s.GPUs - s.HCAs; rest > 0 {
		d.Requests = append(d.Requests, gpuRequest(UnpairedGPUs, s.GPUClass, rest))
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

func hcaRequest(class string, p pair) resourceapi.DeviceRequest {
	rung := func(name string) resourceapi.DeviceSubRequest {
		return resourceapi.DeviceSubRequest{
			Name: name, DeviceClassName: class,
			AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(p.hcas),
		}
	}
	return resourceapi.DeviceRequest{
		Name:           HCARequest(p.index),
		FirstAvailable: []resourceapi.DeviceSubRequest{rung(RungPCIeRoot), rung(RungNUMANode), rung(RungAny)},
	}
}

func gpuRequest(name, class string, count int) resourceapi.DeviceRequest {
	return resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(count),
	}}
}

func match(attr resourceapi.QualifiedName, requests ...string) resourceapi.DeviceConstraint {
	return resourceapi.DeviceConstraint{Requests: requests, MatchAttribute: ptr.To(resourceapi.FullyQualifiedName(attr))}
}

// RungOf reads which pair and rung an allocation result's request name
// ("hcas-3/numa-node") stands for; ok is false for a GPU request.
func RungOf(request string) (pair int, rung string, ok bool) {
	name, rung, found := strings.Cut(request, "/")
	idx, isHCA := strings.CutPrefix(name, "hcas-")
	if !found || !isHCA {
		return 0, "", false
	}
	pair, err := strconv.Atoi(idx)
	if err != nil {
		return 0, "", false
	}
	return pair, rung, true
}
