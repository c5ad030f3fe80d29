package nri

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containerd/nri/pkg/api"

	"github.com/ibkube/ibkube/hca/discovery"
	"github.com/ibkube/ibkube/hca/inventory"
)

// Environment names of the GID index: NCCL's (src/transport/net_ib,
// NCCL_IB_GID_INDEX, default -1: NCCL >= 2.21.5 picks the RoCE v2 IPv4
// entry itself, earlier versions use 0) and UCX's (UCX_IB_GID_INDEX,
// default auto; src/uct/ib/base/ib_iface.c).
const (
	EnvNCCLIBGIDIndex = "NCCL_IB_GID_INDEX"
	EnvUCXIBGIDIndex  = "UCX_IB_GID_INDEX"
)

// ReasonGIDIndex is the pod Event of a container whose RoCE ports give no
// one GID index.
const ReasonGIDIndex = "RoCEGIDIndexNotSet"

// GIDReader reads a port's GID table as it is now.
type GIDReader interface {
	ReadGIDs(hca string, port int) ([]inventory.GIDEntry, string)
}

// GIDEventSink receives the containers whose RoCE GID index could not be
// set; an EventSink may implement it.
type GIDEventSink interface {
	GIDEvent(pod PodRef, container, reason string)
}

// SysfsGIDs reads GID tables under a sysfs root
// (<root>/class/infiniband/<hca>/ports/<n>).
type SysfsGIDs struct{ Root string }

// ReadGIDs implements GIDReader.
func (s SysfsGIDs) ReadGIDs(hca string, port int) ([]inventory.GIDEntry, string) {
	if !discovery.ValidDeviceName(hca) || port < 1 {
		return nil, fmt.Sprintf("not a port: %q/%d", hca, port)
	}
	return discovery.ReadGIDs(filepath.Join(s.Root, "class", "infiniband", hca, "ports", strconv.Itoa(port)))
}

// heldHCAs are the node's HCAs whose uverbs device the container holds.
func heldHCAs(n inventory.Node, devs []*api.LinuxDevice) []inventory.HCA {
	held := map[[2]int64]bool{}
	for _, d := range devs {
		if d.GetType() == "c" {
			held[[2]int64{d.GetMajor(), d.GetMinor()}] = true
		}
	}
	var out []inventory.HCA
	for _, h := range n.HCAs {
		for _, c := range h.CharDevices {
			if strings.HasPrefix(c.Name, "uverbs") && held[[2]int64{int64(c.Major), int64(c.Minor)}] {
				out = append(out, h)
				break
			}
		}
	}
	return out
}

// gidIndex hands the container the RoCE v2 IPv4 GID index of the RoCE
// ports it holds, read now: the address the pod's CNI gave its interface
// exists only once the sandbox is set up, after the device plugin's
// Allocate and before this call. A variable the container already has is
// left alone. Ports that disagree, or one without such an entry, get no
// variable and an Event naming them. It returns what it added
// ("NAME=value"), which the container's main process will see.
func (p *Plugin) gidIndex(pod *api.PodSandbox, ctr *api.Container, adj *api.ContainerAdjustment) []string {
	hcas := heldHCAs(p.inv.Inventory(), ctr.GetLinux().GetDevices())
	if p.cfg.GIDs != nil {
		for i := range hcas {
			ports := append([]inventory.Port(nil), hcas[i].Ports...)
			for j := range ports {
				if ports[j].LinkLayer == inventory.LinkLayerEthernet {
					ports[j].GIDs, ports[j].GIDError = p.cfg.GIDs.ReadGIDs(hcas[i].Name, ports[j].Number)
				}
			}
			hcas[i].Ports = ports
		}
	}
	d := inventory.DecideGIDIndex(hcas)
	if !d.RoCE {
		return nil
	}
	kv := []any{"pod", pod.GetNamespace() + "/" + pod.GetName(), "container", ctr.GetName()}
	if !d.Set {
		p.log.Info("RoCE GID index not set: NCCL < 2.21.5 would use GID 0 (RoCE v1, link-local)", append(kv, "reason", d.Reason)...)
		if s, ok := p.events.(GIDEventSink); ok {
			s.GIDEvent(PodRef{Namespace: pod.GetNamespace(), Name: pod.GetName(), UID: pod.GetUid()}, ctr.GetName(),
				d.Reason+"; "+EnvNCCLIBGIDIndex+" and "+EnvUCXIBGIDIndex+" not set, so NCCL >= 2.21.5 and UCX pick an index themselves and an older NCCL uses GID 0 (RoCE v1, link-local), which does not route on a RoCEv2 fabric")
		}
		return nil
	}
	env := map[string]bool{}
	for _, e := range ctr.GetEnv() {
		name, _, _ := strings.Cut(e, "=")
		env[name] = true
	}
	var added []string
	for _, name := range []string{EnvNCCLIBGIDIndex, EnvUCXIBGIDIndex} {
		if !env[name] {
			adj.AddEnv(name, strconv.Itoa(d.Index))
			added = append(added, name+"="+strconv.Itoa(d.Index))
		}
	}
	p.log.V(1).Info("RoCE GID index", append(kv, "index", d.Index, "added", added)...)
	return added
}
