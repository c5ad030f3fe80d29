package fakegpu

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

func claim(uid types.UID, results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: uid}}
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}
	return c
}

// Prepare writes the claim's spec with only this driver's devices and hands
// out their CDI IDs; a repeat is answered the same; Unprepare removes it and
// a repeat is no error.
func TestPrepareUnprepare(t *testing.T) {
	dir := t.TempDir()
	d := &Driver{cdiDir: dir, log: testr.New(t), gpus: map[string]GPU{
		"gpu-0": {Index: 0, PCIBusID: "0001:00:00.0"}, "gpu-4": {Index: 4, PCIBusID: "0009:00:00.0", NUMANode: 1},
	}}
	ctx := context.Background()
	c := claim("uid-1",
		resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: DriverName, Pool: "node", Device: "gpu-4"},
		resourceapi.DeviceRequestAllocationResult{Request: "hca", Driver: "rdma.infiniband.azure.com", Pool: "node", Device: "ib-mlx5-4"})
	want := kubeletplugin.PrepareResult{Devices: []kubeletplugin.Device{{
		Requests: []string{"gpu"}, PoolName: "node", DeviceName: "gpu-4", CDIDeviceIDs: []string{"e2e.ibkube.io/gpu=uid-1-gpu-4"},
	}}}
	for i := 0; i < 2; i++ {
		got, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(want, got["uid-1"]); d != "" {
			t.Fatalf("prepare %d (-want +got):\n%s", i, d)
		}
	}
	spec, err := os.ReadFile(filepath.Join(dir, CDIFile("uid-1")))
	if err != nil {
		t.Fatal(err)
	}
	wantSpec, _, _ := CDISpec("uid-1", []GPU{{Index: 4, PCIBusID: "0009:00:00.0", NUMANode: 1}})
	if d := cmp.Diff(string(wantSpec), string(spec)); d != "" {
		t.Errorf("CDI spec (-want +got):\n%s", d)
	}
	for i := 0; i < 2; i++ {
		res, err := d.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: "uid-1"}})
		if err != nil || res["uid-1"] != nil {
			t.Fatalf("unprepare %d: %v %v", i, err, res)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, CDIFile("uid-1"))); !os.IsNotExist(err) {
		t.Errorf("CDI spec still there after unprepare: %v", err)
	}
}

func TestPrepareRefusesUnknownAndUnallocated(t *testing.T) {
	d := &Driver{cdiDir: t.TempDir(), log: testr.New(t), gpus: map[string]GPU{}}
	unallocated := claim("uid-2")
	unallocated.Status.Allocation = nil
	got, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{
		claim("uid-1", resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: DriverName, Pool: "node", Device: "gpu-9"}),
		unallocated,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, uid := range []types.UID{"uid-1", "uid-2"} {
		if got[uid].Err == nil {
			t.Errorf("claim %s prepared: %+v", uid, got[uid])
		}
	}
}
