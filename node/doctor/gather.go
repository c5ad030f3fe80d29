package doctor

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/ibkube/ibkube/hca/discovery"
	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/node/config"
	"github.com/ibkube/ibkube/node/counters"
	"github.com/ibkube/ibkube/node/deviceplugin"
	"github.com/ibkube/ibkube/node/memlock"
	"github.com/ibkube/ibkube/node/resource"
)

// Options say where Gather reads.
type Options struct {
	SysfsRoot, DevRoot, ProcRoot string
	// Netlink lists RDMA devices; nil reads sysfs only (fixtures).
	Netlink discovery.Netlink
	// NRI and NRISocket mirror the agent's --nri and --nri-socket.
	NRI       bool
	NRISocket string
	// MemlockMax mirrors the agent's --memlock-max.
	MemlockMax *uint64
	// KubeletSocketDir is the kubelet's device plugin directory ("" means
	// DefaultKubeletSocketDir).
	KubeletSocketDir string
	// Config is the agent's config (pools); nil means the defaults.
	Config *config.AgentConfig
	// PodResourcesSocket is the kubelet's PodResources API, read for which
	// containers hold which HCAs; "" skips that check.
	PodResourcesSocket string
	// StateDir is the agent's --state-dir, where it records the HCAs each
	// shared slot got ("" means /var/lib/ibkube).
	StateDir string
	// CDIDir is the DRA driver's CDI directory (the agent's --cdi-dir),
	// read for HCAs held both ways; "" skips that check.
	CDIDir string
	Logger logr.Logger
}

// Gather reads the facts Check needs. It never fails: what it cannot read
// becomes a fact the checks report.
func Gather(ctx context.Context, o Options) Facts {
	o = o.withDefaults()
	cfg := o.Config
	if cfg == nil {
		cfg = config.Default()
	}
	f := Facts{MemlockMax: o.MemlockMax, NRI: NRIFacts{Enabled: o.NRI, Socket: o.NRISocket}}
	f.Node, f.ScanError = scanNode(ctx, o)
	node := f.Node
	f.Netdevs = netdevStates(o.SysfsRoot, node)
	f.GPUDirect = gatherGPUDirect(o.ProcRoot, o.SysfsRoot)
	gatherRuntime(o, &f)
	f.Counters = counters.Reader{SysfsRoot: o.SysfsRoot}.Read(counters.Targets(node))

	model := resource.Build(cfg, node, resource.Options{HostDevRoot: o.DevRoot})
	f.Advertised = advertised(model)
	f.KubeletPlugins = gatherKubeletPlugins(o.KubeletSocketDir)
	f.Holds = gatherHolds(o.CDIDir, model)
	if o.PodResourcesSocket != "" {
		f.HoldersChecked = true
		var err error
		f.Holders, err = gatherHolders(ctx, o, model)
		if err != nil {
			f.HoldersError = err.Error()
		}
	}
	return f
}

// withDefaults fills the host paths left empty with the host's own.
func (o Options) withDefaults() Options {
	if o.SysfsRoot == "" {
		o.SysfsRoot = "/sys"
	}
	if o.DevRoot == "" {
		o.DevRoot = "/dev"
	}
	if o.ProcRoot == "" {
		o.ProcRoot = "/proc"
	}
	if o.NRISocket == "" {
		o.NRISocket = memlock.DefaultSocketPath
	}
	if o.KubeletSocketDir == "" {
		o.KubeletSocketDir = DefaultKubeletSocketDir
	}
	return o
}

// scanNode discovers the node's HCAs; what it cannot read is the second
// result, next to what it could.
func scanNode(ctx context.Context, o Options) (inventory.Node, string) {
	if err := discovery.CheckSysfsRoot(o.SysfsRoot); err != nil {
		return inventory.Node{}, err.Error()
	}
	scanner := discovery.NewScanner(discovery.Options{SysfsRoot: o.SysfsRoot, DevRoot: o.DevRoot, Netlink: o.Netlink, Logger: o.Logger})
	node, err := scanner.Scan(ctx)
	if err != nil {
		return node, err.Error()
	}
	return node, ""
}

// netdevStates reads the operstate of each port's netdev.
func netdevStates(sysfsRoot string, node inventory.Node) map[string]string {
	states := map[string]string{}
	for _, h := range node.HCAs {
		for _, p := range h.Ports {
			if p.Netdev == "" {
				continue
			}
			state, err := discovery.ReadFile(filepath.Join(sysfsRoot, "class", "net", p.Netdev, "operstate"), discovery.MaxAttrSize)
			if err == nil {
				states[p.Netdev] = strings.TrimSpace(string(state))
			}
		}
	}
	return states
}

// gatherRuntime dials the NRI socket when NRI is on, and learns the
// container runtime's locked-memory limit (from the NRI peer when it
// answered).
func gatherRuntime(o Options, f *Facts) {
	peer := 0
	if o.NRI {
		conn, err := net.DialTimeout("unix", o.NRISocket, 2*time.Second)
		if err != nil {
			f.NRI.Error = dialError(err)
		} else {
			f.NRI.Reachable = true
			peer = memlock.PeerPID(conn)
			conn.Close()
		}
	}
	rl, err := memlock.LearnRuntimeLimit(o.ProcRoot, peer)
	if err != nil {
		f.RuntimeError = err.Error()
	} else {
		f.Runtime = &rl
	}
}

// advertised is what the model's pools would advertise to the kubelet.
func advertised(model *resource.Model) []Advertised {
	var out []Advertised
	for _, p := range model.Pools {
		a := Advertised{Resource: p.Resource, Mode: p.Mode, HCAs: hcaNames(p.HCAs)}
		for _, d := range p.Devices() {
			a.Devices++
			if d.Health == "Healthy" {
				a.Healthy++
			}
		}
		out = append(out, a)
	}
	return out
}

// gatherHolders lists the containers holding the model's HCAs, with each
// shared slot's HCAs as the agent recorded them.
func gatherHolders(ctx context.Context, o Options, model *resource.Model) ([]counters.Holder, error) {
	if o.StateDir == "" {
		o.StateDir = "/var/lib/ibkube"
	}
	grants, err := deviceplugin.LoadGrants(filepath.Join(o.StateDir, deviceplugin.GrantsFileName))
	if err != nil {
		return nil, err
	}
	l, err := counters.NewPodResourcesLister(o.PodResourcesSocket)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	l.Timeout = 5 * time.Second
	cs, err := l.List(ctx)
	if err != nil {
		return nil, err
	}
	a := counters.Attribution{Pools: map[string]counters.PoolView{}}
	for _, p := range model.Pools {
		a.Pools[p.Resource] = counters.PoolView{Exclusive: p.Exclusive(), HCAs: hcaNames(p.HCAs), Grants: grants[p.Resource]}
	}
	return counters.Holders(cs, a), nil
}

// maxModulesSize bounds the read of /proc/modules: a line per module of
// about 60 bytes, and hosts load a few hundred.
const maxModulesSize = 1 << 20

// moduleLoaded reports whether a kernel module is loaded, from
// <proc>/modules or <sys>/module/<name>.
func moduleLoaded(procRoot, sysfsRoot, name string) bool {
	if data, err := discovery.ReadFile(filepath.Join(procRoot, "modules"), maxModulesSize); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(line); len(f) > 0 && f[0] == name {
				return true
			}
		}
	}
	_, err := os.Stat(filepath.Join(sysfsRoot, "module", name))
	return err == nil
}

func dialError(err error) string {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "no such socket"
	case errors.Is(err, os.ErrPermission):
		return "permission denied"
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err.Error()
	}
	return err.Error()
}
