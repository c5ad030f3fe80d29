package dra

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
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
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/node/dra/holds"
)

func newDriver(t testing.TB, h *host, cdiDir string) *Driver {
	t.Helper()
	d, err := New(Config{NodeName: "node-0", CDIDir: cdiDir, RecoverHold: testRecoverHold, MinPublishInterval: testMinPublishInterval}, testr.New(t.(*testing.T)))
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

// testUID is seed when it is a UID, else a UID made from it, so that a
// test can name its claims.
func testUID(seed string) types.UID {
	if holds.CheckUID(types.UID(seed)) == nil {
		return types.UID(seed)
	}
	h := sha256.Sum256([]byte(seed))
	x := hex.EncodeToString(h[:16])
	return types.UID(x[:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32])
}

func claim(uid, name string, results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{UID: testUID(uid), Namespace: "team", Name: name},
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

// mustPrepare prepares c, for a test whose claim under test comes after it.
func mustPrepare(t *testing.T, d *Driver, c *resourceapi.ResourceClaim) {
	t.Helper()
	if r := prepare(t, d, c)[c.UID]; r.Err != nil {
		t.Fatalf("prepare %s: %v", c.Name, r.Err)
	}
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

// TestPrepareRewritesAnotherAllocation: a spec left from an earlier
// allocation of the same claim (deallocated and allocated anew, on another
// HCA, while the spec stayed) is rewritten for the allocation the kubelet
// asks now; the same allocation again keeps its spec byte for byte, and a
// spec of an agent before fingerprints is kept as it is.
func TestPrepareRewritesAnotherAllocation(t *testing.T) {
	t.Parallel()
	h := newHost(t, fixture.NDv5, nil)
	cdi := t.TempDir()
	d := newDriver(t, h, cdi)
	earlier := claim("reallocated", "train-0", alloc("nic", "ib-mlx5-0"))
	mustPrepare(t, d, earlier)
	now := claim("reallocated", "train-0", alloc("nic", "ib-mlx5-3"))
	mustPrepare(t, d, now)
	path := specStore{dir: cdi}.path(now.UID)
	written, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := d.store.read(now.UID)
	if err != nil {
		t.Fatal(err)
	}
	if got := spec.Annotations[holds.AnnotationExclusive]; got != "mlx5_3" {
		t.Errorf("the spec after the new allocation holds %q, want mlx5_3", got)
	}
	if env := spec.Devices[0].ContainerEdits.Env; !slices.Contains(env, "NCCL_IB_HCA==mlx5_3:1") {
		t.Errorf("the spec after the new allocation sets %v, want NCCL_IB_HCA==mlx5_3:1", env)
	}
	mustPrepare(t, d, now)
	if again, _ := os.ReadFile(path); string(again) != string(written) {
		t.Errorf("the same allocation asked again rewrote the spec:\n%s\n%s", written, again)
	}

	// An older agent's spec names no allocation: kept, even by a driver
	// without a model.
	delete(spec.Annotations, annotationAllocation)
	if err := d.store.write(now.UID, spec); err != nil {
		t.Fatal(err)
	}
	older, _ := os.ReadFile(path)
	if r := prepare(t, newDriver(t, nil, cdi), earlier)[earlier.UID]; r.Err != nil {
		t.Errorf("prepare over an older agent's spec: %v", r.Err)
	}
	if kept, _ := os.ReadFile(path); string(kept) != string(older) {
		t.Errorf("an older agent's spec was rewritten:\n%s\n%s", older, kept)
	}
}

func TestAllocationFingerprint(t *testing.T) {
	t.Parallel()
	admin := alloc("nic", "ib-mlx5-0")
	admin.AdminAccess = ptr.To(true)
	base := []resourceapi.DeviceRequestAllocationResult{alloc("nic", "ib-mlx5-0"), alloc("nic", "ib-mlx5-1")}
	fp := AllocationFingerprint(base)
	if got := AllocationFingerprint([]resourceapi.DeviceRequestAllocationResult{base[1], base[0]}); got != fp {
		t.Errorf("the order of the results changed the fingerprint: %s, %s", fp, got)
	}
	for name, other := range map[string][]resourceapi.DeviceRequestAllocationResult{
		"another device":  {alloc("nic", "ib-mlx5-0"), alloc("nic", "ib-mlx5-2")},
		"another request": {alloc("nic", "ib-mlx5-0"), alloc("rail", "ib-mlx5-1")},
		"admin access":    {admin, alloc("nic", "ib-mlx5-1")},
		"one device less": base[:1],
		"a share":         {shared("nic", "ib-mlx5-0", "a"), alloc("nic", "ib-mlx5-1")},
		"another share":   {shared("nic", "ib-mlx5-0", "b"), alloc("nic", "ib-mlx5-1")},
	} {
		if got := AllocationFingerprint(other); got == fp {
			t.Errorf("%s: same fingerprint %s", name, got)
		}
	}
	if a, b := AllocationFingerprint([]resourceapi.DeviceRequestAllocationResult{shared("nic", "ib-mlx5-0", "a")}), AllocationFingerprint([]resourceapi.DeviceRequestAllocationResult{shared("nic", "ib-mlx5-0", "b")}); a == b {
		t.Errorf("two shares of one device have one fingerprint %s", a)
	}
}

func TestPrepareRefuses(t *testing.T) {
	t.Parallel()
	h := newHost(t, fixture.NDv5, nil)
	cdi := t.TempDir()
	d := newDriver(t, h, cdi)
	holder := claim("uid-holder", "holder", alloc("nic", "ib-mlx5-2"))
	mustPrepare(t, d, holder)
	for _, name := range []string{"sharer-a", "sharer-b"} {
		sharer := claim(name, name, shared("s", "shared-ib-mlx5-5", types.UID(name)))
		if r := prepare(t, d, sharer)[sharer.UID]; r.Err != nil {
			t.Errorf("claim %s on a shared device: %v", name, r.Err)
		}
	}
	notOnNode := alloc("nic", "ib-mlx5-3")
	notOnNode.Pool = "node-1"
	unallocated := claim("uid-unallocated", "pending")
	unallocated.Status.Allocation = nil
	for _, tc := range []struct {
		claim *resourceapi.ResourceClaim
		want  string
	}{
		{claim("uid-taken", "taker", alloc("nic", "ib-mlx5-2")), "HCA mlx5_2 is already prepared for claim " + string(testUID("uid-holder"))},
		{claim("uid-share-taken", "share-taker", shared("s", "shared-ib-mlx5-2", "c")), "HCA mlx5_2 is already prepared for claim " + string(testUID("uid-holder")) + ", which holds it exclusively"},
		{claim("uid-take-shared", "take-shared", alloc("nic", "ib-mlx5-5")), "HCA mlx5_5 is already prepared for claim "},
		{claim("uid-unknown", "unknown", alloc("nic", "ib-mlx5-8")), `device "ib-mlx5-8" is not on this node; it has ib-mlx5-0,`},
		{claim("uid-elsewhere", "elsewhere", notOnNode), `device ib-mlx5-3 is in pool "node-1"; this node's pool is "node-0"`},
		{unallocated, "claim team/pending is not allocated"},
	} {
		r := prepare(t, d, tc.claim)[tc.claim.UID]
		if r.Err == nil || !strings.Contains(r.Err.Error(), tc.want) {
			t.Errorf("prepare %s: %v, want an error containing %q", tc.claim.Name, r.Err, tc.want)
		}
		if _, err := os.Stat(holds.SpecPath(cdi, tc.claim.UID)); !os.IsNotExist(err) {
			t.Errorf("prepare %s: a refused claim left a CDI spec", tc.claim.Name)
		}
	}
}

// TestPrepareHoldsByHCA: an HCA is one piece of hardware whichever pool's
// device names it, so an exclusive hold and a share of one HCA exclude each
// other in either order, across pools.
func TestPrepareHoldsByHCA(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		first, second resourceapi.DeviceRequestAllocationResult
	}{
		{"exclusive then shared", alloc("nic", "ib-mlx5-0"), shared("s", "shared-ib-mlx5-0", "b")},
		{"shared then exclusive", shared("s", "shared-ib-mlx5-0", "a"), alloc("nic", "ib-mlx5-0")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := newDriver(t, newHost(t, fixture.NDv5, nil), t.TempDir())
			first, second := claim("first", "first", tc.first), claim("second", "second", tc.second)
			mustPrepare(t, d, first)
			if r := prepare(t, d, second)[second.UID]; r.Err == nil || !strings.Contains(r.Err.Error(), "HCA mlx5_0 is already prepared for claim "+string(first.UID)) {
				t.Errorf("second claim on mlx5_0: %v, want a refusal naming the first claim", r.Err)
			}
			if _, err := d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: first.UID}}); err != nil {
				t.Fatal(err)
			}
			if r := prepare(t, d, second)[second.UID]; r.Err != nil {
				t.Errorf("second claim after the first is unprepared: %v", r.Err)
			}
		})
	}
}

// TestPrepareAdminAccess: a claim allocated with admin access (a monitoring
// DaemonSet's) reaches HCAs that workloads hold, and holds none itself, so
// the workload's claim is prepared in either order.
func TestPrepareAdminAccess(t *testing.T) {
	t.Parallel()
	admin := func() resourceapi.DeviceRequestAllocationResult {
		r := alloc("monitor", "ib-mlx5-1")
		r.AdminAccess = ptr.To(true)
		return r
	}
	for _, adminFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("admin first %t", adminFirst), func(t *testing.T) {
			t.Parallel()
			d := newDriver(t, newHost(t, fixture.NDv5, nil), t.TempDir())
			claims := []*resourceapi.ResourceClaim{claim("monitor", "monitor", admin()), claim("workload", "workload", alloc("nic", "ib-mlx5-1"))}
			if !adminFirst {
				slices.Reverse(claims)
			}
			for _, c := range claims {
				if r := prepare(t, d, c)[c.UID]; r.Err != nil {
					t.Errorf("prepare %s: %v", c.Name, r.Err)
				}
			}
			spec, err := d.store.read(testUID("monitor"))
			if err != nil || spec == nil {
				t.Fatalf("the admin claim's CDI spec: %v %v", spec, err)
			}
			if n := len(spec.Devices); n != 1 || !slices.ContainsFunc(spec.Devices[0].ContainerEdits.DeviceNodes, func(n *cdispec.DeviceNode) bool { return n.Path == "/dev/infiniband/uverbs1" }) {
				t.Errorf("the admin claim's spec does not hand out uverbs1: %+v", spec.Devices)
			}
		})
	}
}

// TestPrepareRefusesNonUID: a claim UID is part of a file name; one that is
// not a UID is refused before it reaches a path, in Prepare and Unprepare.
func TestPrepareRefusesNonUID(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	cdi := filepath.Join(root, "cdi")
	d := newDriver(t, newHost(t, fixture.NDv5, nil), cdi)
	outside := filepath.Join(root, "victim.json")
	if err := os.WriteFile(outside, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, uid := range []types.UID{"../victim", "x/../../victim", "", "0F6A3C1E-5B7D-4D2A-9C3E-1A2B3C4D5E6F"} {
		c := claim("ok", "evil", alloc("nic", "ib-mlx5-6"))
		c.UID = uid
		if r := prepare(t, d, c)[uid]; r.Err == nil || !strings.Contains(r.Err.Error(), "is not a UID") {
			t.Errorf("prepare with UID %q: %v, want a refusal", uid, r.Err)
		}
		res, err := d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: uid}})
		if err != nil || res[uid] == nil || !strings.Contains(res[uid].Error(), "is not a UID") {
			t.Errorf("unprepare with UID %q: %v %v, want a refusal", uid, res, err)
		}
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("a file outside the CDI directory is gone: %v", err)
	}
	entries, _ := filepath.Glob(filepath.Join(root, "*"))
	if len(entries) > 2 {
		t.Errorf("files written outside the CDI directory: %v", entries)
	}
}
