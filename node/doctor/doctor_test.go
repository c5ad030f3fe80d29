package doctor

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/internal/testing/golden"
	"github.com/ibkube/ibkube/internal/testing/kubeletstub"
	"github.com/ibkube/ibkube/node/deviceplugin"
)

// host is the non-RDMA part of a fake node.
type host struct {
	modules        []string // loaded kernel modules
	runtimeMemlock string   // containerd's "Max locked memory" soft and hard; "" = no containerd
	nriListening   bool
	// rdmaSharedDevPlugin: the Network Operator's rdma-shared-dev-plugin
	// registered rdma/shared_ib last (its socket and checkpoint entry).
	rdmaSharedDevPlugin bool
	// podResources, when set, is what the kubelet's PodResources API
	// lists, and grants the agent's record of shared slots' HCAs.
	podResources []*podresourcesv1.PodResources
	grants       deviceplugin.SlotGrants
	gpu          gpuHost
}

// gpuHost is what a node shows of its GPU driver and kernel: the first
// line of /proc/driver/nvidia/version, /sys/module/nvidia/taint, the
// kernel release and the symbols /proc/kallsyms lists.
type gpuHost struct {
	nvidiaVersion, taint, kernel string
	symbols                      []string
}

// The GPU sides the fixtures use. h200VM is the H200 VM of
// ../shared/hosts/h200-vm.md: the open module on an inbox RDMA core.
// aksOFED is an AKS GPU node with the proprietary driver and DOCA-OFED (its
// RDMA core has the peer memory API); aksInbox the same without OFED.
var (
	h200VM = gpuHost{
		nvidiaVersion: "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U22-I3-AF03-09-1)",
		taint:         "O", kernel: "6.18.44-fc-v657-gpu",
		symbols: []string{"dma_buf_get", "ib_umem_dmabuf_get", "ib_umem_dmabuf_get_pinned", "mlx5_ib_reg_user_mr_dmabuf"},
	}
	aksOFED = gpuHost{
		nvidiaVersion: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.127.05  Tue Oct  8 03:22:07 UTC 2024",
		taint:         "POE", kernel: "5.15.0-1079-azure",
		symbols: []string{"dma_buf_get", "ib_umem_dmabuf_get", "ib_register_peer_memory_client"},
	}
	aksInbox = gpuHost{nvidiaVersion: aksOFED.nvidiaVersion, taint: aksOFED.taint, kernel: aksOFED.kernel,
		symbols: []string{"dma_buf_get", "ib_umem_dmabuf_get"}}
)

// writeGPUHost writes h's modules and GPU facts under the proc and sysfs
// roots: a loaded module has /sys/module/<name>/version, which is where
// NCCL looks for nvidia_peermem.
func writeGPUHost(t *testing.T, procRoot, sysfsRoot string, h host) {
	t.Helper()
	for _, m := range h.modules {
		dir := filepath.Join(sysfsRoot, "module", m)
		must(t, os.MkdirAll(dir, 0o755))
		must(t, os.WriteFile(filepath.Join(dir, "version"), []byte("1.0\n"), 0o644))
	}
	g := h.gpu
	if g.kernel == "" {
		return
	}
	must(t, os.MkdirAll(filepath.Join(procRoot, "sys", "kernel"), 0o755))
	must(t, os.WriteFile(filepath.Join(procRoot, "sys", "kernel", "osrelease"), []byte(g.kernel+"\n"), 0o644))
	var syms strings.Builder
	for _, s := range g.symbols {
		fmt.Fprintf(&syms, "0000000000000000 T %s\n", s)
	}
	must(t, os.WriteFile(filepath.Join(procRoot, "kallsyms"), []byte(syms.String()), 0o644))
	if g.nvidiaVersion != "" {
		must(t, os.MkdirAll(filepath.Join(procRoot, "driver", "nvidia"), 0o755))
		must(t, os.WriteFile(filepath.Join(procRoot, "driver", "nvidia", "version"), []byte(g.nvidiaVersion+"\nGCC version:  gcc version 12.3.0\n"), 0o644))
	}
	if g.taint != "" {
		must(t, os.MkdirAll(filepath.Join(sysfsRoot, "module", "nvidia"), 0o755))
		must(t, os.WriteFile(filepath.Join(sysfsRoot, "module", "nvidia", "taint"), []byte(g.taint+"\n"), 0o644))
	}
}

var (
	goodHost = host{modules: []string{"nvidia", "nvidia_peermem", "mlx5_ib"}, runtimeMemlock: "unlimited unlimited", nriListening: true, gpu: aksOFED}
	badHost  = host{modules: []string{"nvidia", "mlx5_ib"}, runtimeMemlock: "65536 8388608", gpu: aksInbox}
	// h200Host is the H200 VM: nvidia and nvidia_uvm loaded, no peermem.
	h200Host = host{modules: []string{"nvidia", "nvidia_uvm"}, runtimeMemlock: "unlimited unlimited", nriListening: true, gpu: h200VM}
)

func writeHost(t *testing.T, root string, h host) Options {
	t.Helper()
	proc := filepath.Join(root, "proc")
	must(t, os.MkdirAll(proc, 0o755))
	var mods strings.Builder
	for _, m := range h.modules {
		fmt.Fprintf(&mods, "%s 65536 0 - Live 0x0000000000000000\n", m)
	}
	must(t, os.WriteFile(filepath.Join(proc, "modules"), []byte(mods.String()), 0o644))
	if h.runtimeMemlock != "" {
		dir := filepath.Join(proc, "1234")
		must(t, os.MkdirAll(dir, 0o755))
		must(t, os.WriteFile(filepath.Join(dir, "comm"), []byte("containerd\n"), 0o644))
		must(t, os.WriteFile(filepath.Join(dir, "limits"), []byte("Limit                     Soft Limit           Hard Limit           Units\nMax locked memory         "+h.runtimeMemlock+"  bytes\n"), 0o644))
	}
	sock := filepath.Join(root, "nri.sock")
	if h.nriListening {
		l, err := net.Listen("unix", sock)
		must(t, err)
		t.Cleanup(func() { l.Close() })
	}
	o := Options{ProcRoot: proc, NRI: true, NRISocket: sock, KubeletSocketDir: writeKubeletDir(t, root, h.rdmaSharedDevPlugin)}
	if h.podResources != nil {
		o.PodResourcesSocket = filepath.Join(root, "pod-resources.sock")
		kubeletstub.StartPodResources(t, o.PodResourcesSocket, h.podResources...)
		o.StateDir = filepath.Join(root, "state")
		g := &deviceplugin.GrantsFile{Path: filepath.Join(o.StateDir, deviceplugin.GrantsFileName)}
		for res, slots := range h.grants {
			for slot, hcas := range slots {
				must(t, g.Record(res, []string{slot}, hcas))
			}
		}
	}
	return o
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestDoctorGolden(t *testing.T) {
	t.Parallel()
	type tc struct {
		name, fixture string
		host          host
		nriOff        bool
		// cdiDir is the DRA driver's CDI directory (testdata/cdi/...).
		cdiDir string
	}
	var cases []tc
	for _, n := range fixture.Names() {
		cases = append(cases, tc{name: n, fixture: n, host: goodHost})
	}
	cases = append(cases,
		tc{name: "ndv5-no-nri-low-memlock-no-peermem", fixture: fixture.NDv5, host: badHost},
		tc{name: "ndv5-nri-disabled-no-runtime", fixture: fixture.NDv5, host: host{}, nriOff: true},
		tc{name: "no-devices", host: goodHost},
		// GPUDirect passes by DMA-BUF on the H200 VM's facts, although
		// nvidia_peermem is not (and cannot be) loaded there.
		tc{name: "h200-vm-dmabuf", host: h200Host},
		// The proprietary module without peermem, with and without the
		// peer memory API: the fix offered must be one that can work.
		tc{name: "ndv5-proprietary-ofed-no-peermem", fixture: fixture.NDv5, host: host{modules: []string{"nvidia", "mlx5_ib"}, runtimeMemlock: "unlimited unlimited", nriListening: true, gpu: aksOFED}},
		tc{name: "ndv5-rdma-shared-dev-plugin", fixture: fixture.NDv5, host: host{modules: goodHost.modules, runtimeMemlock: goodHost.runtimeMemlock, nriListening: true, rdmaSharedDevPlugin: true}},
		// ml/late was admitted exclusively on mlx5_0 after dev/old got a
		// slot reaching every HCA; dev/new's slot left mlx5_0 out.
		tc{name: "ndv5-exclusive-shared", fixture: fixture.NDv5, host: host{modules: goodHost.modules, runtimeMemlock: goodHost.runtimeMemlock, nriListening: true,
			podResources: []*podresourcesv1.PodResources{
				kubeletstub.Pod("ml", "late", kubeletstub.Container("c", map[string][]string{"rdma/ib": {"mlx5_0"}})),
				kubeletstub.Pod("dev", "old", kubeletstub.Container("nb", map[string][]string{"rdma/shared_ib": {"slot-1"}})),
				kubeletstub.Pod("dev", "new", kubeletstub.Container("nb", map[string][]string{"rdma/shared_ib": {"slot-2"}})),
			},
			grants: deviceplugin.SlotGrants{"rdma/shared_ib": {"slot-2": {"mlx5_1", "mlx5_2"}}},
		}},
		// A DRA node whose claims from before the counters hold mlx5_1
		// exclusively and shared.
		tc{name: "ndv5-dra-held-both-ways", fixture: fixture.NDv5, host: goodHost, cdiDir: "testdata/cdi/held-both-ways"},
	)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			o := writeHost(t, root, c.host)
			o.NRI = !c.nriOff
			o.CDIDir = c.cdiDir
			if c.fixture != "" {
				must(t, fixture.Build(filepath.Join(root, "node"), c.fixture))
			} else {
				must(t, os.MkdirAll(filepath.Join(root, "node", "sys"), 0o755))
				must(t, os.MkdirAll(filepath.Join(root, "node", "dev"), 0o755))
			}
			o.SysfsRoot = fixture.SysfsRoot(filepath.Join(root, "node"))
			o.DevRoot = fixture.DevRoot(filepath.Join(root, "node"))
			writeGPUHost(t, o.ProcRoot, o.SysfsRoot, c.host)
			r := Check(Gather(context.Background(), o))

			var text, js bytes.Buffer
			must(t, r.WriteText(&text))
			must(t, r.WriteJSON(&js))
			golden.Check(t, filepath.Join("testdata", c.name+".txt"), []byte(strings.ReplaceAll(text.String(), root, "$ROOT")))
			golden.Check(t, filepath.Join("testdata", c.name+".json"), []byte(strings.ReplaceAll(js.String(), root, "$ROOT")))
		})
	}
}

func TestFailedDecidesExit(t *testing.T) {
	t.Parallel()
	if r := Check(Facts{}); !r.Failed {
		t.Error("an empty node must fail")
	}
	// A RoCE node (no IPoIB to fail on) with one rail of two down: the
	// ports check alone must fail it, so node health automation sees it.
	roce := func(state string, n int) inventory.HCA {
		return inventory.HCA{Name: fmt.Sprintf("mlx5_%d", n), Healthy: state == inventory.PortStateActive,
			Ports: []inventory.Port{{Number: 1, State: state, PhysState: "LinkUp", LinkLayer: "Ethernet"}}}
	}
	r := Check(Facts{Node: inventory.Node{HCAs: []inventory.HCA{roce(inventory.PortStateActive, 0), roce("DOWN", 1)}}})
	if !r.Failed || r.Results[1].Name != CheckPorts || r.Results[1].Status != Fail {
		t.Errorf("one RoCE port down: %+v", r)
	}
}

// TestPortsCause: the ports check names the cause each state pair points
// to. The state names are the kernel's (drivers/infiniband/core/sysfs.c
// state_show: NOP DOWN INIT ARMED ACTIVE ACTIVE_DEFER; phys_state_to_str:
// Sleep Polling Disabled PortConfigurationTraining LinkUp LinkErrorRecovery
// "Phy Test").
func TestPortsCause(t *testing.T) {
	t.Parallel()
	tests := []struct {
		state, phys, linkLayer, netdev string
		want                           string
	}{
		{"DOWN", "Polling", "InfiniBand", "", "Polling: no physical link; the cable is unplugged or faulty, or the switch port is down"},
		{"DOWN", "Disabled", "InfiniBand", "", "Disabled: the port is administratively disabled (on this host or by the switch); enable it (`ibportstate <lid> <port> enable`, or on the switch)"},
		{"DOWN", "Sleep", "InfiniBand", "", "Sleep: the port is asleep (its link-down default); check the cable and that the switch port is enabled"},
		{"DOWN", "PortConfigurationTraining", "InfiniBand", "", "PortConfigurationTraining: link training with the switch has not finished; a cable or switch port that cannot run the port's speed keeps it here"},
		{"ACTIVE", "LinkErrorRecovery", "InfiniBand", "", "LinkErrorRecovery: the link is recovering from errors; a bad cable or connector, check `ibstat` and the port's error counters"},
		{"DOWN", "Phy Test", "InfiniBand", "", "physical state Phy Test: check the port with `ibstat`"},
		{"INIT", "LinkUp", "InfiniBand", "", "INIT with the link up: no subnet manager has configured the port; check that an SM runs on the fabric and sees this port (on Azure the VM must be in the scale set's InfiniBand partition)"},
		{"ARMED", "LinkUp", "InfiniBand", "", "ARMED with the link up: the subnet manager configured the port but has not activated it; it should become ACTIVE at the SM's next sweep, else check the SM's log"},
		{"DOWN", "Disabled", "Ethernet", "rdma3", "RoCE port Disabled: its netdev rdma3 is down or has no carrier; check `ip link`, the cable and the switch port"},
		{"", "LinkUp", "InfiniBand", "", "a port state could not be read: see rdma-devices for the cause"},
	}
	for _, tc := range tests {
		f := Facts{Node: inventory.Node{HCAs: []inventory.HCA{{Name: "mlx5_0", Ports: []inventory.Port{
			{Number: 1, State: tc.state, PhysState: tc.phys, LinkLayer: tc.linkLayer, Netdev: tc.netdev},
			{Number: 2, State: "ACTIVE", PhysState: "LinkUp", LinkLayer: tc.linkLayer},
		}}}}}
		r := checkPorts(f)
		if r.Status != Fail || r.Fix != tc.want {
			t.Errorf("%s/%s: %s %q, fix %q; want FAIL, fix %q", tc.state, tc.phys, r.Status, r.Message, r.Fix, tc.want)
		}
	}
	// ACTIVE but not LinkUp is not a usable port either.
	r := checkPorts(Facts{Node: inventory.Node{HCAs: []inventory.HCA{{Name: "mlx5_0", Ports: []inventory.Port{
		{Number: 1, State: "ACTIVE", PhysState: "LinkErrorRecovery", LinkLayer: "InfiniBand"}}}}}})
	if r.Status != Fail || r.Message != "no port is ACTIVE and LinkUp: mlx5_0/1 ACTIVE (LinkErrorRecovery)" {
		t.Errorf("ACTIVE/LinkErrorRecovery: %s %q", r.Status, r.Message)
	}
}

// TestDoctorHostileTree: a FIFO where a port state should be, and a device
// name with a terminal escape, give a report (not a hang) whose text holds
// no escape character and names the causes.
func TestDoctorHostileTree(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	o := writeHost(t, root, goodHost)
	node := filepath.Join(root, "node")
	must(t, fixture.Build(node, fixture.HB))
	ib := filepath.Join(fixture.SysfsRoot(node), "class", "infiniband")
	state := filepath.Join(ib, "mlx5_0", "ports", "1", "state")
	must(t, os.Remove(state))
	must(t, unix.Mkfifo(state, 0o644))
	must(t, os.Symlink("mlx5_0", filepath.Join(ib, "mlx5_\x1b]0;owned\x07")))
	o.SysfsRoot, o.DevRoot = fixture.SysfsRoot(node), fixture.DevRoot(node)
	writeGPUHost(t, o.ProcRoot, o.SysfsRoot, goodHost)

	done := make(chan Report, 1)
	go func() { done <- Check(Gather(context.Background(), o)) }()
	var r Report
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("doctor did not finish within 10s on a tree with a FIFO")
	}
	var text bytes.Buffer
	must(t, r.WriteText(&text))
	out := text.String()
	if strings.ContainsAny(out, "\x1b\x07") {
		t.Errorf("escape characters reached the text report:\n%q", out)
	}
	for _, want := range []string{
		`mlx5_\x1b]0;owned\a`,
		"port 1: cannot read state: not a regular file (a FIFO)",
		"a port state could not be read: see rdma-devices for the cause",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text report lacks %q:\n%s", want, out)
		}
	}
}
