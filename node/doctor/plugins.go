package doctor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/ibkube/ibkube/hca/discovery"
	"github.com/ibkube/ibkube/node/deviceplugin"
	"github.com/ibkube/ibkube/node/resource"
)

// CheckOtherPlugins is the check that no other device plugin registers
// ibkube's resource names on this node.
const CheckOtherPlugins = "other-plugins"

// DefaultKubeletSocketDir is the kubelet's device plugin directory.
const DefaultKubeletSocketDir = "/var/lib/kubelet/device-plugins"

// kubeletCheckpoint is the device manager's checkpoint file in the device
// plugin directory (kubernetes pkg/kubelet/cm/devicemanager/manager.go
// kubeletDeviceManagerCheckpoint).
const kubeletCheckpoint = "kubelet_internal_checkpoint"

// maxCheckpointSize bounds the checkpoint read. The kubelet writes one JSON
// document holding an entry per allocated device of every pod on the node
// plus the registered device IDs: a few hundred KiB on a full node. The read
// goes through discovery.ReadFile (non-blocking open, regular files only),
// so a FIFO, /dev/zero or a huge file in its place is an error, not a hang
// or an exhausted doctor.
const maxCheckpointSize = 16 << 20

// KubeletPluginFacts are what the kubelet's device plugin directory shows.
type KubeletPluginFacts struct {
	Dir string
	// Sockets are the plugin sockets there (by name: *.sock), other than
	// kubelet.sock.
	Sockets []string
	// Registered is the checkpoint's RegisteredDevices: the device IDs the
	// kubelet last got from the plugin registered for each resource.
	Registered map[string][]string
	// Error says why the directory or the checkpoint could not be read.
	Error string
}

// checkpointFile is the part of the kubelet's checkpoint this check reads:
// {"Data":{"PodDeviceEntries":[...],"RegisteredDevices":{"<resource>":["<id>",...]}},"Checksum":N}
// (kubernetes pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go, Data
// and checkpointData).
type checkpointFile struct {
	Data struct {
		RegisteredDevices map[string][]string
	}
}

// gatherKubeletPlugins reads the sockets and the checkpoint in dir.
func gatherKubeletPlugins(dir string) KubeletPluginFacts {
	f := KubeletPluginFacts{Dir: dir}
	entries, err := os.ReadDir(dir)
	if err != nil {
		f.Error = err.Error()
		return f
	}
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".sock") && e.Name() != deviceplugin.KubeletSocket {
			f.Sockets = append(f.Sockets, e.Name())
		}
	}
	b, err := discovery.ReadFile(filepath.Join(dir, kubeletCheckpoint), maxCheckpointSize)
	switch {
	case err == nil:
		var cp checkpointFile
		if err := json.Unmarshal(b, &cp); err != nil {
			f.Error = fmt.Sprintf("parse %s: %v", kubeletCheckpoint, err)
			return f
		}
		f.Registered = cp.Data.RegisteredDevices
	case !os.IsNotExist(err):
		f.Error = err.Error()
	}
	return f
}

// checkOtherPlugins says when another device plugin (the Network Operator's
// rdma-shared-dev-plugin or sriov-network-device-plugin) registers one of the
// resource names the agent advertises. The kubelet keeps one plugin per
// resource name, the last to register, so pods asking for it get that
// plugin's devices and none of ibkube's NCCL_IB_HCA, topology file or
// memlock. Two signs are read: the checkpoint holding device IDs ibkube never
// hands out for one of its resources (rdma-shared-dev-plugin numbers its
// slots "0", "1", ...; sriov-network-device-plugin uses PCI addresses;
// ibkube uses "slot-N" and HCA names), and a socket in the directory named
// after one of its resources that is not ibkube's.
func checkOtherPlugins(f Facts) Result {
	res := Result{Name: CheckOtherPlugins}
	k := f.KubeletPlugins
	if k.Error != "" {
		res.Status = Warn
		res.Message = fmt.Sprintf("cannot read the kubelet's device plugin directory %s: %s", k.Dir, k.Error)
		res.Fix = "run on the node, or pass --kubelet-socket-dir where the kubelet keeps kubelet.sock"
		return res
	}
	var conflicts, lookalikes, ours []string
	for _, a := range f.Advertised {
		ours = append(ours, a.Resource)
		if foreign := foreignIDs(a, k.Registered[a.Resource]); len(foreign) > 0 {
			conflicts = append(conflicts, fmt.Sprintf("%s is registered with device IDs ibkube does not hand out (%s)", a.Resource, abbreviate(foreign, 4)))
		}
		short := a.Resource[strings.LastIndex(a.Resource, "/")+1:]
		for _, s := range k.Sockets {
			base := strings.TrimSuffix(s, ".sock")
			if !deviceplugin.IsSocketOf(a.Resource, s) && !strings.HasPrefix(s, "ibkube-") && (base == short || base == strings.ReplaceAll(a.Resource, "/", "_")) {
				lookalikes = append(lookalikes, fmt.Sprintf("%s (like %s)", s, a.Resource))
			}
		}
	}
	var others []string
	for _, s := range k.Sockets {
		if !strings.HasPrefix(s, "ibkube-") {
			others = append(others, s)
		}
	}
	switch {
	case len(conflicts) > 0:
		res.Status = Fail
		res.Message = "another device plugin registers ibkube's resources: " + strings.Join(conflicts, "; ")
		if len(lookalikes) > 0 {
			res.Message += "; sockets: " + strings.Join(lookalikes, ", ")
		}
		res.Fix = "the kubelet keeps only the plugin that registered last, so pods get its devices without ibkube's NCCL_IB_HCA, topology file or memlock; remove the other plugin's resource (Network Operator NicClusterPolicy rdmaSharedDevicePlugin / sriovDevicePlugin) from this node, or give ibkube's pools other resource names in the agent config"
	case len(lookalikes) > 0:
		res.Status = Warn
		res.Message = "sockets named after ibkube's resources that are not ibkube's: " + strings.Join(lookalikes, ", ")
		res.Fix = "if another device plugin serves these names (Network Operator rdma-shared-dev-plugin, sriov-network-device-plugin), the kubelet keeps whichever registered last; run one plugin per resource name"
	default:
		res.Status = Pass
		res.Message = fmt.Sprintf("no other device plugin registers %s", orNone(ours))
		if len(others) > 0 {
			res.Message += fmt.Sprintf(" (other plugin sockets: %s)", strings.Join(others, ", "))
		}
	}
	return res
}

// foreignIDs returns the registered IDs of a resource that its ibkube pool
// would not advertise, sorted.
func foreignIDs(a Advertised, registered []string) []string {
	var out []string
	for _, id := range registered {
		mine := false
		if a.Mode == "shared" {
			for i := 0; i < a.Devices && !mine; i++ {
				mine = id == resource.SlotID(i)
			}
		} else {
			mine = slices.Contains(a.HCAs, id)
		}
		if !mine {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

func abbreviate(ids []string, n int) string {
	if len(ids) <= n {
		return strings.Join(ids, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(ids[:n], ", "), len(ids)-n)
}
