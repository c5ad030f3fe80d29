package dra

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/fixture"
)

// TestAllocatorHeldTwiceBlocksTheNode pins what docs/dra-driver.md ("Held
// both ways") says an HCA held both ways costs: with mlx5_0's exclusive
// and shared devices both allocated (claims from before the counters), its
// counter is over-committed and kube-scheduler's allocator gives no other
// HCA of the node to `rdma/ib` or to a new share; only a further share of
// the shared device already in use still fits.
func TestAllocatorHeldTwiceBlocksTheNode(t *testing.T) {
	t.Parallel()
	s := newScheduler(t, newHost(t, fixture.NDv5, nil))
	held := func(name, device string, share *types.UID) *resourceapi.ResourceClaim {
		c := extendedClaim(name, contract.DeviceClassIB, 1)
		c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "container-0-request-0", Driver: contract.DRADriverName, Pool: "node-0", Device: device, ShareID: share,
		}}}}
		return c
	}
	s.allocated = append(s.allocated, held("exclusive", "ib-mlx5-0", nil), held("sharer", "shared-ib-mlx5-0", ptr.To(types.UID("11111111-1111-1111-1111-111111111111"))))
	if a := s.allocate(extendedClaim("one-hca", contract.DeviceClassIB, 1)); a != nil {
		t.Errorf("rdma/ib: 1 got %v beside an HCA held both ways; the docs say the node allocates none", s.hcasOf(a))
	}
	if a := s.allocate(hcaClaim("new-share", contract.DeviceClassSharedIB, "mlx5_5")); a != nil {
		t.Errorf("a new share of mlx5_5 got %v beside an HCA held both ways", s.hcasOf(a))
	}
	if a := s.allocate(hcaClaim("further-share", contract.DeviceClassSharedIB, "mlx5_0")); a == nil {
		t.Error("a further share of mlx5_0's shared device, already in use, does not fit")
	}
}
