package nri

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"

	"github.com/ibkube/ibkube/hca/discovery"
	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/hca/inventory"
)

type gidEvents struct {
	eventRecorder
	gid chan string
}

func (g gidEvents) GIDEvent(_ PodRef, _ string, reason string) { g.gid <- reason }

// uverbsOf is the container device of an HCA's uverbs node.
func uverbsOf(t *testing.T, n inventory.Node, hca string) *api.LinuxDevice {
	t.Helper()
	for _, h := range n.HCAs {
		if h.Name != hca {
			continue
		}
		for _, c := range h.CharDevices {
			if strings.HasPrefix(c.Name, "uverbs") {
				return &api.LinuxDevice{Path: "/dev/infiniband/" + c.Name, Type: "c", Major: int64(c.Major), Minor: int64(c.Minor)}
			}
		}
	}
	t.Fatalf("no uverbs device of %s", hca)
	return nil
}

// TestGIDIndexAtCreate: on the OCI BM.GPU.H100.8 fixture, a container
// holding GPU-fabric ports gets NCCL_IB_GID_INDEX=3 and UCX_IB_GID_INDEX=3
// from the GID tables as they are at CreateContainer (the pod's address may
// be newer than the last scan), in its environment and in its rank conf; a
// value of its own stays; ports that disagree or lack an IPv4 GID give
// nothing and an Event naming them.
func TestGIDIndexAtCreate(t *testing.T) {
	t.Parallel()
	dir := fixture.BuildTemp(t, fixture.OCIH100)
	node, err := discovery.NewScanner(discovery.Options{SysfsRoot: fixture.SysfsRoot(dir), DevRoot: fixture.DevRoot(dir), Logger: testr.New(t)}).Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	events := gidEvents{eventRecorder{make(chan recordedEvent, 10)}, make(chan string, 10)}
	p, err := NewPlugin(Config{RankConfDir: t.TempDir(), GIDs: SysfsGIDs{Root: fixture.SysfsRoot(dir)}}, staticInventory(node), testr.New(t), nil, events)
	if err != nil {
		t.Fatal(err)
	}
	pod := &api.PodSandbox{Id: "pod1", Name: "w", Namespace: "hpc", Uid: "u1"}
	envOf := func(adj *api.ContainerAdjustment) map[string]string {
		out := map[string]string{}
		for _, e := range adj.GetEnv() {
			out[e.Key] = e.Value
		}
		return out
	}
	ctr := func(id string, env []string, hcas ...string) *api.Container {
		c := &api.Container{Id: id, Name: id, Env: env, User: &api.User{Uid: 0}, Linux: &api.LinuxContainer{}}
		for _, h := range hcas {
			c.Linux.Devices = append(c.Linux.Devices, uverbsOf(t, node, h))
		}
		return c
	}

	adj := p.createContainer(pod, ctr("gpu", []string{"NCCL_IB_HCA==mlx5_0:1,mlx5_1:1"}, "mlx5_0", "mlx5_1"))
	if d := cmp.Diff(map[string]string{EnvNCCLIBGIDIndex: "3", EnvUCXIBGIDIndex: "3"}, envOf(adj)); d != "" {
		t.Errorf("environment added (-want +got):\n%s", d)
	}
	conf, err := os.ReadFile(filepath.Join(p.cfg.RankConfDir, "gpu"+rankConfSuffix))
	if err != nil || !strings.Contains(string(conf), "\nNCCL_IB_GID_INDEX=3\n") {
		t.Errorf("rank conf lacks the GID index: %q, %v", conf, err)
	}

	adj = p.createContainer(pod, ctr("own", []string{"NCCL_IB_GID_INDEX=1"}, "mlx5_0"))
	if d := cmp.Diff(map[string]string{EnvUCXIBGIDIndex: "3"}, envOf(adj)); d != "" {
		t.Errorf("a container with its own NCCL_IB_GID_INDEX (-want +got):\n%s", d)
	}

	// mlx5_11's IPv4 GID is at 7 (a sparse table and a macvlan).
	adj = p.createContainer(pod, ctr("mixed", nil, "mlx5_0", "mlx5_11"))
	if got := envOf(adj); got[EnvNCCLIBGIDIndex] != "" || got[EnvUCXIBGIDIndex] != "" {
		t.Errorf("ports that disagree got %v", got)
	}
	if r := <-events.gid; !strings.Contains(r, "3 on mlx5_0/1; 7 on mlx5_11/1") {
		t.Errorf("event %q does not name the ports and their indexes", r)
	}

	// The pod's address goes away (a no-IPAM interface): the table read at
	// creation, not the scan, decides.
	for _, i := range []string{"2", "3"} {
		gid := filepath.Join(fixture.SysfsRoot(dir), "class/infiniband/mlx5_0/ports/1/gids", i)
		if err := os.WriteFile(gid, []byte("0000:0000:0000:0000:0000:0000:0000:0000\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	adj = p.createContainer(pod, ctr("noaddr", nil, "mlx5_0"))
	if got := envOf(adj); len(got) != 0 {
		t.Errorf("a port without an IPv4 GID got %v", got)
	}
	if r := <-events.gid; !strings.Contains(r, "no RoCE v2 GID of an IPv4 address on mlx5_0/1") {
		t.Errorf("event %q does not say what is missing", r)
	}
}
