package dra

import (
	"os"
	"slices"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/node/memlock"
)

// TestCDISpecAcceptedByRuntime reads the prepared specs with the CDI
// library containerd 2.4 builds with (tags.cncf.io/container-device-interface
// v1.1.1, containerd's go.mod) and injects the devices into an OCI spec as
// containerd does before it starts a container. With real char devices
// (root: fixture.WithCharDevices) the runtime's stat fills in major:minor,
// which the NRI memlock plugin then matches against the node's devices.
func TestCDISpecAcceptedByRuntime(t *testing.T) {
	t.Parallel()
	h, root := injectableHost(t)
	h.topology = h.dir + "/nccl-topo.xml"
	dir := t.TempDir()
	d := newDriver(t, h, dir)
	c := gpuNIC()
	mustPrepare(t, d, c)
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if errs := cache.GetErrors(); len(errs) > 0 {
		t.Fatalf("the CDI library refuses the spec: %v", errs)
	}
	nics, ipoib := CDIDeviceID(c.UID, "nics"), CDIDeviceID(c.UID, "ipoib")
	for _, id := range []string{nics, ipoib} {
		if cache.GetDevice(id) == nil {
			t.Errorf("CDI device %s not found; the cache has %v", id, cache.ListDevices())
		}
	}
	if !root {
		t.Skip("injection needs real char devices (mknod): run as root")
	}
	spec := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	if unresolved, err := cache.InjectDevices(spec, nics); err != nil {
		t.Fatalf("inject %s: %v (unresolved %v)", nics, err, unresolved)
	}
	type dev struct {
		path         string
		major, minor int64
	}
	var got []dev
	for _, x := range spec.Linux.Devices {
		got = append(got, dev{x.Path, x.Major, x.Minor})
	}
	// uverbs: major 231, minors from 192 (drivers/infiniband/core/uverbs_main.c);
	// rdma_cm: misc major 10, the fixture's minor 58.
	want := []dev{{"/dev/infiniband/uverbs0", 231, 192}, {"/dev/infiniband/uverbs1", 231, 193}, {"/dev/infiniband/rdma_cm", 10, 58}}
	if !slices.Equal(want, got) {
		t.Errorf("injected devices = %v, want %v", got, want)
	}
	// The NRI memlock plugin sees the container after this injection
	// (containerd builds the OCI spec, CDI included, before NRI's
	// CreateContainer), and its rule keys on /dev/infiniband char devices
	// by major:minor: a DRA-prepared container qualifies as a device-plugin
	// one does, with no marker of its own.
	var ctrDevs []memlock.Device
	for _, x := range spec.Linux.Devices {
		ctrDevs = append(ctrDevs, memlock.Device{Path: x.Path, Type: x.Type, Major: x.Major, Minor: x.Minor})
	}
	decision := memlock.Decide(memlock.Input{
		PodAnnotations: map[string]string{contract.AnnotationMemlock: "unlimited"},
		Devices:        ctrDevs,
		IBDevices:      memlock.DevicesOf(h.scan(t)),
		Runtime:        &memlock.Limit{Soft: 8 << 20, Hard: memlock.Unlimited},
	})
	if decision.Outcome != memlock.OutcomeSet {
		t.Errorf("memlock for a DRA-prepared container: %s (%s), want %s", decision.Outcome, decision.Reason, memlock.OutcomeSet)
	}
	if !slices.Contains(spec.Process.Env, "NCCL_IB_HCA==mlx5_0:1,mlx5_1:1") {
		t.Errorf("injected env %v lacks NCCL_IB_HCA", spec.Process.Env)
	}
	if !slices.ContainsFunc(spec.Mounts, func(m oci.Mount) bool {
		return m.Destination == "/etc/ibkube/nccl-topo.xml" && slices.Contains(m.Options, "ro")
	}) {
		t.Errorf("injected mounts %v lack the read-only topology file", spec.Mounts)
	}
}

// TestClaimOfOneRequestPerHCANamesEveryHCA: the aligned GPU+HCA claim has
// one request per HCA, so a container that references it gets one CDI
// device per HCA, each setting NCCL_IB_HCA. The CDI library (as containerd
// injects) keeps the last value of a repeated variable, so each device must
// carry the whole claim's list; an IPoIB share of the same claim keeps its
// own.
func TestClaimOfOneRequestPerHCANamesEveryHCA(t *testing.T) {
	t.Parallel()
	h, root := injectableHost(t)
	dir := t.TempDir()
	d := newDriver(t, h, dir)
	c := claim("5d1c0b7e-2f4a-4c6d-8e9f-0a1b2c3d4e5f", "aligned-0",
		alloc("hca-0-0", "ib-mlx5-0"), alloc("hca-1-0", "ib-mlx5-1"), alloc("hca-2-0", "ib-mlx5-2"),
		shared("ipoib", "shared-ib-mlx5-4", "share-1"))
	mustPrepare(t, d, c)
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	const hcas = "NCCL_IB_HCA==mlx5_0:1,mlx5_1:1,mlx5_2:1"
	for _, req := range []string{"hca-0-0", "hca-1-0", "hca-2-0"} {
		dev := cache.GetDevice(CDIDeviceID(c.UID, req))
		if dev == nil {
			t.Fatalf("CDI device of %s not found; the cache has %v", req, cache.ListDevices())
		}
		if !slices.Contains(dev.ContainerEdits.Env, hcas) {
			t.Errorf("request %s env %v lacks %s", req, dev.ContainerEdits.Env, hcas)
		}
	}
	if !root {
		t.Skip("injection needs real char devices (mknod): run as root")
	}
	spec := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	ids := []string{CDIDeviceID(c.UID, "hca-0-0"), CDIDeviceID(c.UID, "hca-1-0"), CDIDeviceID(c.UID, "hca-2-0")}
	if unresolved, err := cache.InjectDevices(spec, ids...); err != nil {
		t.Fatalf("inject %v: %v (unresolved %v)", ids, err, unresolved)
	}
	var got []string
	for _, e := range spec.Process.Env {
		if strings.HasPrefix(e, "NCCL_IB_HCA=") || strings.HasPrefix(e, "UCX_NET_DEVICES=") {
			got = append(got, e)
		}
	}
	want := []string{hcas, "UCX_NET_DEVICES=mlx5_0:1,mlx5_1:1,mlx5_2:1"}
	if !slices.Equal(got, want) {
		t.Errorf("the container's port lists after injection = %v, want %v", got, want)
	}
}

// injectableHost is an ND H100 v5 host whose devices the CDI library can
// inject: with real char devices where the test runs as root (mknod), so
// the runtime's stat fills in major:minor; root says whether it could.
func injectableHost(t *testing.T) (h *host, root bool) {
	t.Helper()
	var opts []fixture.Option
	root = os.Geteuid() == 0
	if root {
		opts = append(opts, fixture.WithCharDevices())
	}
	h = newHost(t, fixture.NDv5, nil, opts...)
	h.hostDevRoot = fixture.DevRoot(h.dir)
	return h, root
}
