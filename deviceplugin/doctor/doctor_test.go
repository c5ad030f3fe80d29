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

	"github.com/ibkube/ibkube/deviceplugin/fixture"
	"github.com/ibkube/ibkube/deviceplugin/inventory"
	"github.com/ibkube/ibkube/internal/golden"
)

// host is the non-RDMA part of a fake node.
type host struct {
	modules        []string // loaded kernel modules
	runtimeMemlock string   // containerd's "Max locked memory" soft and hard; "" = no containerd
	nriListening   bool
	// rdmaSharedDevPlugin: the Network Operator's rdma-shared-dev-plugin
	// registered rdma/shared_ib last (its socket and checkpoint entry).
	rdmaSharedDevPlugin bool
}

var (
	goodHost = host{modules: []string{"nvidia", "nvidia_peermem", "mlx5_ib"}, runtimeMemlock: "unlimited unlimited", nriListening: true}
	badHost  = host{modules: []string{"nvidia", "mlx5_ib"}, runtimeMemlock: "65536 8388608"}
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
	return Options{ProcRoot: proc, NRI: true, NRISocket: sock, KubeletSocketDir: writeKubeletDir(t, root, h.rdmaSharedDevPlugin)}
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
	}
	var cases []tc
	for _, n := range fixture.Names() {
		cases = append(cases, tc{name: n, fixture: n, host: goodHost})
	}
	cases = append(cases,
		tc{name: "ndv5-no-nri-low-memlock-no-peermem", fixture: fixture.NDv5, host: badHost},
		tc{name: "ndv5-nri-disabled-no-runtime", fixture: fixture.NDv5, host: host{}, nriOff: true},
		tc{name: "no-devices", host: goodHost},
		tc{name: "ndv5-rdma-shared-dev-plugin", fixture: fixture.NDv5, host: host{modules: goodHost.modules, runtimeMemlock: goodHost.runtimeMemlock, nriListening: true, rdmaSharedDevPlugin: true}},
	)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			o := writeHost(t, root, c.host)
			o.NRI = !c.nriOff
			if c.fixture != "" {
				must(t, fixture.Build(filepath.Join(root, "node"), c.fixture))
			} else {
				must(t, os.MkdirAll(filepath.Join(root, "node", "sys"), 0o755))
				must(t, os.MkdirAll(filepath.Join(root, "node", "dev"), 0o755))
			}
			o.SysfsRoot = fixture.SysfsRoot(filepath.Join(root, "node"))
			o.DevRoot = fixture.DevRoot(filepath.Join(root, "node"))
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
