package dra

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/utils/ptr"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/fixture"
)

func newDriver(t testing.TB, h *host, cdiDir string) *Driver {
	t.Helper()
	d, err := New(Config{NodeName: "node-0", CDIDir: cdiDir}, testr.New(t.(*testing.T)))
	if err != nil {
		t.Fatal(err)
	}
	if h != nil {
		d.Update(h.model(t))
	}
	return d
}

func alloc(request, device string) resourceapi.DeviceRequestAllocationResult {
	return resourceapi.DeviceRequestAllocationResult{Request: request, Driver: contract.DRADriverName, Pool: "node-0", Device: device}
}

func shared(request, device string, share types.UID) resourceapi.DeviceRequestAllocationResult {
	r := alloc(request, device)
	r.ShareID = &share
	return r
}

func claim(uid, name string, results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Namespace: "team", Name: name},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: results},
		}},
	}
}

func prepare(t *testing.T, d *Driver, claims ...*resourceapi.ResourceClaim) map[types.UID]kubeletplugin.PrepareResult {
	t.Helper()
	res, err := d.PrepareResourceClaims(context.Background(), claims)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(claims) {
		t.Fatalf("%d results for %d claims", len(res), len(claims))
	}
	return res
}

// gpuNIC is a claim like the GPU-aligned template's: two exclusive HCAs in
// one request, a shared one in another, and a GPU of another driver.
func gpuNIC() *resourceapi.ResourceClaim {
	gpu := resourceapi.DeviceRequestAllocationResult{Request: "gpus", Driver: "gpu.example.com", Pool: "node-0", Device: "gpu-0"}
	return claim("0f6a3c1e-5b7d-4d2a-9c3e-1a2b3c4d5e6f", "train-0",
		gpu, alloc("nics", "ib-mlx5-0"), alloc("nics", "ib-mlx5-1"), shared("ipoib", "shared-ib-mlx5-4", "share-1"))
}

func TestPrepareGolden(t *testing.T) {
	t.Parallel()
	h := newHost(t, fixture.NDv5, nil)
	h.topology = "/var/lib/ibkube/topology/ndv5-topo.xml"
	cdi := t.TempDir()
	d := newDriver(t, h, cdi)
	c := gpuNIC()
	got := prepare(t, d, c)[c.UID]
	if got.Err != nil {
		t.Fatal(got.Err)
	}
	id := func(req string) []string { return []string{CDIDeviceID(c.UID, req)} }
	want := kubeletplugin.PrepareResult{Devices: []kubeletplugin.Device{
		{Requests: []string{"nics"}, PoolName: "node-0", DeviceName: "ib-mlx5-0", CDIDeviceIDs: id("nics")},
		{Requests: []string{"nics"}, PoolName: "node-0", DeviceName: "ib-mlx5-1", CDIDeviceIDs: id("nics")},
		{Requests: []string{"ipoib"}, PoolName: "node-0", DeviceName: "shared-ib-mlx5-4", CDIDeviceIDs: id("ipoib"), ShareID: ptr.To(types.UID("share-1"))},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("prepare result (-want +got):\n%s", diff)
	}
	spec, err := d.store.read(c.UID)
	if err != nil || spec == nil {
		t.Fatalf("CDI spec of the claim: %v, %v", spec, err)
	}
	golden(t, "ndv5.claim.cdi.json", spec)
	nics := spec.Devices[0].ContainerEdits
	var paths []string
	for _, n := range nics.DeviceNodes {
		paths = append(paths, n.Path)
	}
	if d := cmp.Diff([]string{"/dev/infiniband/uverbs0", "/dev/infiniband/uverbs1", "/dev/infiniband/rdma_cm"}, paths); d != "" {
		t.Errorf("request nics gets (-want +got):\n%s", d)
	}
	for _, env := range []string{"NCCL_IB_HCA==mlx5_0:1,mlx5_1:1", "UCX_NET_DEVICES=mlx5_0:1,mlx5_1:1", "NCCL_TOPO_FILE=/etc/ibkube/nccl-topo.xml"} {
		if !slices.Contains(nics.Env, env) {
			t.Errorf("request nics env %v lacks %s", nics.Env, env)
		}
	}
}

// TestPrepareIdempotentAcrossRestart prepares a claim, asks again as a
// restarted kubelet would, again from a new driver process that has no
// model yet (the agent restarting), and unprepares after the claim object
// is gone, twice.
func TestPrepareIdempotentAcrossRestart(t *testing.T) {
	t.Parallel()
	h := newHost(t, fixture.NDv5, nil)
	cdi := t.TempDir()
	c := gpuNIC()
	first := prepare(t, newDriver(t, h, cdi), c)[c.UID]
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	path := specStore{dir: cdi}.path(c.UID)
	written, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	again := prepare(t, newDriver(t, h, cdi), c)[c.UID]
	restarted := prepare(t, newDriver(t, nil, cdi), c)[c.UID]
	for name, got := range map[string]kubeletplugin.PrepareResult{"again": again, "after restart": restarted} {
		if d := cmp.Diff(first, got); d != "" {
			t.Errorf("prepare %s (-first +now):\n%s", name, d)
		}
	}
	if now, _ := os.ReadFile(path); string(now) != string(written) {
		t.Errorf("the CDI spec changed on a repeated prepare:\n%s\n%s", written, now)
	}
	gone := []kubeletplugin.NamespacedObject{{UID: c.UID, NamespacedName: types.NamespacedName{Namespace: "team", Name: "train-0"}}}
	for i := range 2 {
		res, err := newDriver(t, nil, cdi).UnprepareResourceClaims(context.Background(), gone)
		if err != nil || res[c.UID] != nil {
			t.Fatalf("unprepare %d: %v, %v", i, res, err)
		}
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Fatalf("unprepare %d left %s: %v", i, path, err)
		}
	}
}

func TestPrepareRefuses(t *testing.T) {
	t.Parallel()
	h := newHost(t, fixture.NDv5, nil)
	cdi := t.TempDir()
	d := newDriver(t, h, cdi)
	holder := claim("uid-holder", "holder", alloc("nic", "ib-mlx5-2"), shared("s", "shared-ib-mlx5-2", "a"))
	if r := prepare(t, d, holder)[holder.UID]; r.Err != nil {
		t.Fatal(r.Err)
	}
	sharer := claim("uid-sharer", "sharer", shared("s", "shared-ib-mlx5-2", "b"))
	if r := prepare(t, d, sharer)[sharer.UID]; r.Err != nil {
		t.Errorf("a second claim on a shared device: %v", r.Err)
	}
	notOnNode := alloc("nic", "ib-mlx5-3")
	notOnNode.Pool = "node-1"
	unallocated := claim("uid-unallocated", "pending")
	unallocated.Status.Allocation = nil
	for _, tc := range []struct {
		claim *resourceapi.ResourceClaim
		want  string
	}{
		{claim("uid-taken", "taker", alloc("nic", "ib-mlx5-2")), "exclusive device ib-mlx5-2 is already prepared for claim uid-holder"},
		{claim("uid-unknown", "unknown", alloc("nic", "ib-mlx5-8")), `device "ib-mlx5-8" is not on this node; it has shared-ib-mlx5-0,`},
		{claim("uid-elsewhere", "elsewhere", notOnNode), `device ib-mlx5-3 is in pool "node-1"; this node's pool is "node-0"`},
		{unallocated, "claim team/pending is not allocated"},
	} {
		r := prepare(t, d, tc.claim)[tc.claim.UID]
		if r.Err == nil || !strings.Contains(r.Err.Error(), tc.want) {
			t.Errorf("prepare %s: %v, want an error containing %q", tc.claim.Name, r.Err, tc.want)
		}
		if _, err := os.Stat(filepath.Join(cdi, specPrefix+string(tc.claim.UID)+".json")); !os.IsNotExist(err) {
			t.Errorf("prepare %s: a refused claim left a CDI spec", tc.claim.Name)
		}
	}
}
