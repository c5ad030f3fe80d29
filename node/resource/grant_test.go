package resource

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ibkube/ibkube/node/config"
)

// TestGrantMerge: a DRA request drawing on two pools gets one grant; the
// port lists name both pools' ports once each, NCCL_IB_HCA keeps its exact
// match "=", shared char devices (rdma_cm) and the topology mount appear
// once, and any other variable keeps the first pool's value.
func TestGrantMerge(t *testing.T) {
	t.Parallel()
	m := Build(config.Default(), ndv5(), Options{HostDevRoot: "/dev", Profile: Profile{TopologyFile: "/var/lib/ibkube/topo.xml"}})
	a, err := m.Pool("rdma/ib").AllocateHCAs([]string{"mlx5_0", "mlx5_1"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Pool("rdma/shared_ib").AllocateHCAs([]string{"mlx5_1", "mlx5_2"})
	if err != nil {
		t.Fatal(err)
	}
	b.Env = append(b.Env, EnvVar{"ZZ_ONLY_SECOND", "x"})
	b.Env[1].Value = "/elsewhere.xml" // NCCL_TOPO_FILE: the first value stays
	a.Merge(b)
	dev := func(name string) DeviceNode {
		return DeviceNode{ContainerPath: "/dev/infiniband/" + name, HostPath: "/dev/infiniband/" + name, Permissions: "rw"}
	}
	want := Grant{
		Devices: []DeviceNode{dev("uverbs0"), dev("uverbs1"), dev("rdma_cm"), dev("uverbs2")},
		Mounts:  []Mount{{ContainerPath: TopologyContainerPath, HostPath: "/var/lib/ibkube/topo.xml"}},
		Env: []EnvVar{
			{EnvNCCLIBHCA, "=mlx5_0:1,mlx5_1:1,mlx5_2:1"},
			{EnvNCCLTopoFile, TopologyContainerPath},
			{EnvUCXNetDevices, "mlx5_0:1,mlx5_1:1,mlx5_2:1"},
			{"ZZ_ONLY_SECOND", "x"},
		},
	}
	if d := cmp.Diff(want, a); d != "" {
		t.Errorf("merged grant (-want +got):\n%s", d)
	}
}
