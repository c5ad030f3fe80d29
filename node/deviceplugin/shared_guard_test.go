package deviceplugin

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/ibkube/ibkube/internal/testing/kubeletstub"
	"github.com/ibkube/ibkube/node/config"
	"github.com/ibkube/ibkube/node/counters"
	"github.com/ibkube/ibkube/node/resource"
)

// A shared slot leaves out the HCAs the kubelet's PodResources API (a stub
// serving the real gRPC API) shows held exclusively; when every HCA is held
// it is refused naming the holders; when PodResources cannot answer it gets
// every HCA. What each slot got is recorded, so an exclusive holder the
// kubelet admits later (which no device plugin can refuse) is reported as
// an overlap naming the sharer.
func TestSharedSlotLeavesOutExclusivelyHeldHCAs(t *testing.T) {
	t.Parallel()
	dir, stub, podres, lister := kubeletWithPodResources(t)

	model := resource.Build(config.Default(), testNode(), resource.Options{HostDevRoot: "/dev"})
	grantsPath := filepath.Join(dir, "state", GrantsFileName)
	attribution := func() counters.Attribution {
		grants, err := LoadGrants(grantsPath)
		if err != nil {
			t.Errorf("grants: %v", err)
		}
		return poolsAttribution(model, grants)
	}
	m := NewManager(Options{
		SocketDir: dir, Logger: testr.New(t),
		Holds:  counters.ExclusiveHolds{Lister: lister, Attribution: attribution},
		Grants: &GrantsFile{Path: grantsPath},
	}, specs(model))
	ctx := runForTest(t, m)
	if _, err := stub.WaitRegistration("rdma/shared_ib", wait); err != nil {
		t.Fatal(err)
	}
	shared, err := stub.Client("rdma/shared_ib")
	if err != nil {
		t.Fatal(err)
	}
	allocate := func(slot string) (*pluginapi.ContainerAllocateResponse, error) {
		resp, err := shared.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{slot}}}})
		if err != nil {
			return nil, err
		}
		return resp.ContainerResponses[0], nil
	}
	uverbs := func(r *pluginapi.ContainerAllocateResponse) []string {
		var out []string
		for _, d := range r.Devices {
			out = append(out, filepath.Base(d.ContainerPath))
		}
		return out
	}

	trainer := kubeletstub.Pod("ml", "train-0", kubeletstub.Container("trainer", map[string][]string{"rdma/ib": {"mlx5_0", "mlx5_5"}}))
	podres.Set(trainer)
	got, err := allocate("slot-3")
	if err != nil {
		t.Fatalf("Allocate slot-3 while ml/train-0 holds mlx5_0 and mlx5_5: %v", err)
	}
	if want := "=mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_6:1,mlx5_7:1"; got.Envs["NCCL_IB_HCA"] != want {
		t.Errorf("shared slot NCCL_IB_HCA %q, want %q (the exclusively held mlx5_0 and mlx5_5 left out)", got.Envs["NCCL_IB_HCA"], want)
	}
	if diff := cmp.Diff([]string{"uverbs1", "uverbs2", "uverbs3", "uverbs4", "uverbs6", "uverbs7", "rdma_cm"}, uverbs(got)); diff != "" {
		t.Errorf("shared slot devices (-want +got):\n%s", diff)
	}
	if podres.Lists() == 0 {
		t.Error("Allocate never asked the PodResources API")
	}

	// The sharer runs; then the kubelet admits an exclusive pod on mlx5_1,
	// which the shared slot reaches: reported, naming both.
	sharer := kubeletstub.Pod("dev", "nb", kubeletstub.Container("nb", map[string][]string{"rdma/shared_ib": {"slot-3"}}))
	late := kubeletstub.Pod("ml", "late", kubeletstub.Container("c", map[string][]string{"rdma/ib": {"mlx5_1"}}))
	podres.Set(trainer, sharer, late)
	cs, err := lister.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	overlaps := counters.Overlaps(counters.Holders(cs, attribution()))
	if diff := cmp.Diff([]counters.Overlap{{HCA: "mlx5_1", Exclusive: "ml/late/c", Sharers: []string{"dev/nb/nb"}}}, overlaps); diff != "" {
		t.Errorf("overlaps (-want +got):\n%s", diff)
	}

	// Every HCA held: refused, naming the holders.
	podres.Set(trainer, kubeletstub.Pod("ml", "train-1", kubeletstub.Container("trainer",
		map[string][]string{"rdma/ib": {"mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_6", "mlx5_7"}})))
	_, err = allocate("slot-4")
	if err == nil || !strings.Contains(err.Error(), "mlx5_0 by ml/train-0/trainer") || !strings.Contains(err.Error(), "mlx5_7 by ml/train-1/trainer") {
		t.Errorf("Allocate with every HCA held exclusively: %v, want a refusal naming the holders", err)
	}

	// PodResources gone: the slot gets every healthy HCA (and the
	// overlap report names what results).
	podres.Stop()
	got, err = allocate("slot-5")
	if err != nil {
		t.Fatalf("Allocate without PodResources: %v", err)
	}
	if want := "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1"; got.Envs["NCCL_IB_HCA"] != want {
		t.Errorf("without PodResources NCCL_IB_HCA %q, want every HCA %q", got.Envs["NCCL_IB_HCA"], want)
	}
	grants, err := LoadGrants(grantsPath)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string][]string{
		"slot-3": {"mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_6", "mlx5_7"},
		"slot-5": {"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7"},
	}, grants["rdma/shared_ib"]); diff != "" {
		t.Errorf("recorded grants (-want +got):\n%s", diff)
	}
}

// While every healthy HCA is held exclusively, the shared slots are
// advertised Unhealthy (the kubelet then admits no shared pod, and the
// scheduler sees no allocatable rdma/shared_ib), and Healthy again once one
// HCA is free; the kubelet says nothing when a container ends, so the
// plugin asks PodResources every HoldsPeriod. The exclusive resource's list
// is not touched.
func TestSharedSlotsUnhealthyWhileEveryHCAIsHeld(t *testing.T) {
	t.Parallel()
	dir, stub, podres, lister := kubeletWithPodResources(t)
	model := resource.Build(config.Default(), testNode(), resource.Options{HostDevRoot: "/dev"})
	attribution := func() counters.Attribution { return poolsAttribution(model, nil) }
	m := NewManager(Options{
		SocketDir: dir, Logger: testr.New(t),
		Holds:       counters.ExclusiveHolds{Lister: lister, Attribution: attribution},
		HoldsPeriod: 20 * time.Millisecond,
	}, specs(model))
	runForTest(t, m)
	every := func(health string) func([]*pluginapi.Device) bool {
		return func(devs []*pluginapi.Device) bool {
			return len(devs) == config.DefaultSharedSlots && !slices.ContainsFunc(devs, func(d *pluginapi.Device) bool { return d.Health != health })
		}
	}
	if _, err := stub.WaitList("rdma/shared_ib", wait, every(pluginapi.Healthy)); err != nil {
		t.Fatalf("shared slots before any hold: %v", err)
	}

	first := kubeletstub.Pod("ml", "train-0", kubeletstub.Container("trainer", map[string][]string{"rdma/ib": {"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"}}))
	second := kubeletstub.Pod("ml", "train-1", kubeletstub.Container("trainer", map[string][]string{"rdma/ib": {"mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7"}}))
	podres.Set(first)
	// Half the HCAs held: the slots stay Healthy (a sharer gets the rest).
	// Two of the plugin's own polls seen by the stub: the second saw the hold.
	if err := podres.WaitLists(podres.Lists()+2, wait); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-stub.Lists("rdma/shared_ib"):
		t.Errorf("the shared slots changed with half the HCAs held: %v", l.Devices)
	default:
	}
	podres.Set(first, second)
	if _, err := stub.WaitList("rdma/shared_ib", wait, every(pluginapi.Unhealthy)); err != nil {
		t.Fatalf("shared slots while every HCA is held exclusively: %v", err)
	}
	podres.Set(second)
	if _, err := stub.WaitList("rdma/shared_ib", wait, every(pluginapi.Healthy)); err != nil {
		t.Fatalf("shared slots once mlx5_0..3 are free: %v", err)
	}
	for n := len(stub.Lists("rdma/ib")); n > 0; n-- {
		if l := <-stub.Lists("rdma/ib"); slices.ContainsFunc(l.Devices, func(d *pluginapi.Device) bool { return d.Health != pluginapi.Healthy }) {
			t.Errorf("the exclusive resource advertised %v; its devices are healthy", l.Devices)
		}
	}
}

// kubeletWithPodResources starts a kubelet stub in a fresh socket dir, with
// a PodResources server beside it and the agent's own lister of it, all
// stopped with the test.
func kubeletWithPodResources(t *testing.T) (string, *kubeletstub.Stub, *kubeletstub.PodResources, *counters.PodResourcesLister) {
	t.Helper()
	dir := t.TempDir()
	stub := kubeletstub.Start(t, dir)
	socket := filepath.Join(dir, "pod-resources.sock")
	podres := kubeletstub.StartPodResources(t, socket)
	lister, err := counters.NewPodResourcesLister(socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lister.Close() })
	return dir, stub, podres, lister
}

// poolsAttribution is the agent's view of the model's pools for the
// counters, as the agent builds it (counters.PoolViews).
func poolsAttribution(model *resource.Model, grants SlotGrants) counters.Attribution {
	return counters.Attribution{Pools: counters.PoolViews(model, grants)}
}
