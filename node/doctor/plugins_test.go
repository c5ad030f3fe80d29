package doctor

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// writeKubeletDir builds a kubelet device plugin directory: kubelet.sock, an
// NVIDIA GPU plugin's socket and ibkube's, and a checkpoint in the kubelet's
// format (kubernetes pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go).
// With rsdp, rdma-shared-dev-plugin registered rdma/shared_ib last: its
// socket is <resource name>.sock and its devices are numbered "0".."62"
// (Mellanox/k8s-rdma-shared-dev-plugin pkg/resources/server.go
// newResourceServer).
func writeKubeletDir(t *testing.T, root string, rsdp bool) string {
	t.Helper()
	dir := filepath.Join(root, "device-plugins")
	must(t, os.MkdirAll(dir, 0o755))
	socks := []string{"kubelet.sock", "nvidia-gpu.sock", "ibkube-rdma_shared_ib.sock", "ibkube-rdma_ib.sock"}
	shared := make([]string, 63)
	for i := range shared {
		shared[i] = fmt.Sprintf("%q", fmt.Sprintf("slot-%d", i))
	}
	if rsdp {
		socks = append(socks, "shared_ib.sock")
		for i := range shared {
			shared[i] = fmt.Sprintf("%q", fmt.Sprint(i))
		}
	}
	for _, s := range socks {
		must(t, os.WriteFile(filepath.Join(dir, s), nil, 0o600))
	}
	cp := `{"Data":{"PodDeviceEntries":[{"PodUID":"u1","ContainerName":"c","ResourceName":"nvidia.com/gpu","DeviceIDs":{"-1":["GPU-1"]},"AllocResp":"CgA="}],` +
		`"RegisteredDevices":{"nvidia.com/gpu":["GPU-1"],"rdma/shared_ib":[` + strings.Join(shared, ",") + `],` +
		`"rdma/ib":["mlx5_0","mlx5_1","mlx5_2","mlx5_3","mlx5_4","mlx5_5","mlx5_6","mlx5_7"]}},"Checksum":1234}`
	must(t, os.WriteFile(filepath.Join(dir, kubeletCheckpoint), []byte(cp), 0o644))
	return dir
}

func TestCheckOtherPlugins(t *testing.T) {
	t.Parallel()
	shared := Advertised{Resource: "rdma/shared_ib", Mode: "shared", Devices: 3, Healthy: 3, HCAs: []string{"mlx5_0", "mlx5_1"}}
	excl := Advertised{Resource: "rdma/ib", Mode: "exclusive", Devices: 2, Healthy: 2, HCAs: []string{"mlx5_0", "mlx5_1"}}
	tests := []struct {
		name string
		k    KubeletPluginFacts
		want Result
	}{
		{
			name: "only ibkube",
			k: KubeletPluginFacts{Dir: "/d", Sockets: []string{"ibkube-rdma_shared_ib.sock", "ibkube-rdma_ib.sock", "nvidia-gpu.sock"},
				Registered: map[string][]string{"rdma/shared_ib": {"slot-0", "slot-1", "slot-2"}, "rdma/ib": {"mlx5_1"}, "nvidia.com/gpu": {"0"}}},
			want: Result{Name: CheckOtherPlugins, Status: Pass, Message: "no other device plugin registers rdma/shared_ib,rdma/ib (other plugin sockets: nvidia-gpu.sock)"},
		},
		{
			name: "sriov-network-device-plugin registered rdma/ib with PCI addresses",
			k:    KubeletPluginFacts{Dir: "/d", Registered: map[string][]string{"rdma/ib": {"0101:00:00.0", "0102:00:00.0"}}},
			want: Result{Name: CheckOtherPlugins, Status: Fail,
				Message: "another device plugin registers ibkube's resources: rdma/ib is registered with device IDs ibkube does not hand out (0101:00:00.0, 0102:00:00.0)"},
		},
		{
			name: "a socket named like ibkube's resource, checkpoint still ibkube's",
			k:    KubeletPluginFacts{Dir: "/d", Sockets: []string{"shared_ib.sock", "ibkube-rdma_shared_ib.sock"}, Registered: map[string][]string{"rdma/shared_ib": {"slot-0"}}},
			want: Result{Name: CheckOtherPlugins, Status: Warn, Message: "sockets named after ibkube's resources that are not ibkube's: shared_ib.sock (like rdma/shared_ib)"},
		},
		{
			name: "directory unreadable",
			k:    KubeletPluginFacts{Dir: "/d", Error: "open /d: no such file or directory"},
			want: Result{Name: CheckOtherPlugins, Status: Warn, Message: "cannot read the kubelet's device plugin directory /d: open /d: no such file or directory"},
		},
		{
			name: "no checkpoint yet",
			k:    KubeletPluginFacts{Dir: "/d"},
			want: Result{Name: CheckOtherPlugins, Status: Pass, Message: "no other device plugin registers rdma/shared_ib,rdma/ib"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := checkOtherPlugins(Facts{Advertised: []Advertised{shared, excl}, KubeletPlugins: tc.k})
			got.Fix = ""
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}
