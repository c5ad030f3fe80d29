package nri

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/nri/pkg/api"

	"github.com/ibkube/ibkube/hca/discovery"
	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/node/memlock"
)

// EnvNCCLIBGIDIndex is NCCL's GID index (NVIDIA/nccl src/transport/net_ib,
// NCCL_IB_GID_INDEX, default -1 from NCCL 2.21.5: NCCL picks the RoCE v2
// IPv4 entry itself; earlier versions use 0). UCX_IB_GID_INDEX is never
// set: UCX picks the entry itself from 1.6, and a set index also applies to
// InfiniBand ports and fails UCX together with UCX_IB_ROCE_SUBNETS (openucx/ucx
// src/uct/ib/base/ib_iface.c uct_ib_iface_init_roce_gid_info).
const EnvNCCLIBGIDIndex = "NCCL_IB_GID_INDEX"

// ReasonGIDIndex is the pod Event of a container whose NCCL needs a RoCE
// GID index the agent could not find for the pod.
const ReasonGIDIndex = "RoCEGIDIndexNotSet"

// gidReadTries bounds how often a GID table is read until two reads in a
// row agree: the kernel changes entries as addresses come and go, and an
// entry's GID and its type are separate files.
const gidReadTries = 5

// GIDReader reads a port's GID table as it is now.
type GIDReader interface {
	ReadGIDs(hca string, port int) ([]inventory.GIDEntry, string)
}

// PodAddrLister lists the IP addresses of a pod's network namespace, where
// the pod's interfaces on a RoCE port (macvlan, SR-IOV VF, a moved netdev)
// hold the addresses whose GIDs belong to it; a GIDReader may implement it.
type PodAddrLister interface {
	PodAddrs(pod *api.PodSandbox) ([]netip.Addr, error)
}

// GIDEventSink receives the containers whose RoCE GID index could not be
// set; an EventSink may implement it.
type GIDEventSink interface {
	GIDEvent(pod PodRef, container, reason string)
}

// SysfsGIDs reads GID tables under a sysfs root
// (<root>/class/infiniband/<hca>/ports/<n>), and a pod's addresses in the
// network namespace of its sandbox process under ProcRoot ("" is /proc).
type SysfsGIDs struct{ Root, ProcRoot string }

// ReadGIDs implements GIDReader.
func (s SysfsGIDs) ReadGIDs(hca string, port int) ([]inventory.GIDEntry, string) {
	if !discovery.ValidDeviceName(hca) || port < 1 {
		return nil, fmt.Sprintf("not a port: %q/%d", hca, port)
	}
	return discovery.ReadGIDs(filepath.Join(s.Root, "class", "infiniband", hca, "ports", strconv.Itoa(port)))
}

// readGIDsConsistent reads a table until two reads in a row agree, so that
// an entry's GID and type come from one state of the table.
func readGIDsConsistent(r GIDReader, hca string, port int) ([]inventory.GIDEntry, string) {
	prev, why := r.ReadGIDs(hca, port)
	for range gidReadTries - 1 {
		if why != "" {
			return nil, why
		}
		cur, curWhy := r.ReadGIDs(hca, port)
		if curWhy == "" && slices.Equal(prev, cur) {
			return cur, ""
		}
		prev, why = cur, curWhy
	}
	return nil, fmt.Sprintf("the GID table changed on each of %d reads", gidReadTries)
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

// gidIndex sets NCCL_IB_GID_INDEX for a container holding RoCE ports,
// only where the NCCL its image holds does not choose the GID itself
// (plan.NeedsGIDIndex: before 2.21.5, and no GID selector of the user's),
// to the entry whose address is the pod's own on every port, read as the
// tables are now: the address the pod's CNI gave its interface exists only
// once the sandbox is set up, after the device plugin's Allocate and before
// this call. Where no such entry is agreed, nothing is set and an Event
// says why. It returns what it added ("NAME=value").
func (p *Plugin) gidIndex(pod *api.PodSandbox, ctr *api.Container, adj *api.ContainerAdjustment, plan memlock.NCCLPlan) []string {
	hcas := roceHCAs(heldHCAs(p.inv.Inventory(), ctr.GetLinux().GetDevices()))
	if len(hcas) == 0 {
		return nil
	}
	kv := []any{"pod", pod.GetNamespace() + "/" + pod.GetName(), "container", ctr.GetName()}
	need, why := plan.NeedsGIDIndex(ctr.GetEnv())
	if !need {
		p.log.V(1).Info("RoCE GID index left to the library", append(kv, "reason", why)...)
		return nil
	}
	if p.cfg.GIDs != nil {
		for i := range hcas {
			for j := range hcas[i].Ports {
				hcas[i].Ports[j].GIDs, hcas[i].Ports[j].GIDError = readGIDsConsistent(p.cfg.GIDs, hcas[i].Name, hcas[i].Ports[j].Number)
			}
		}
	}
	addrs, addrErr := p.podAddrs(pod)
	index, reason := podGIDIndex(hcas, addrs, addrErr)
	if reason != "" {
		reason = why + ", and " + reason + "; " + EnvNCCLIBGIDIndex + " not set"
		p.log.Info("RoCE GID index not set", append(kv, "reason", reason)...)
		if s, ok := p.events.(GIDEventSink); ok {
			s.GIDEvent(PodRef{Namespace: pod.GetNamespace(), Name: pod.GetName(), UID: pod.GetUid()}, ctr.GetName(),
				reason+": set it in the pod, or use an image with NCCL >= 2.21.5, which picks the RoCE v2 IPv4 GID itself")
		}
		return nil
	}
	adj.AddEnv(EnvNCCLIBGIDIndex, strconv.Itoa(index))
	added := EnvNCCLIBGIDIndex + "=" + strconv.Itoa(index)
	p.log.V(1).Info("RoCE GID index", append(kv, "index", index, "why", why)...)
	return []string{added}
}

// roceHCAs keeps the HCAs' RoCE ports, copied so that reading their
// tables does not touch the inventory.
func roceHCAs(hcas []inventory.HCA) []inventory.HCA {
	var out []inventory.HCA
	for _, h := range hcas {
		var ports []inventory.Port
		for _, pt := range h.Ports {
			if pt.LinkLayer == inventory.LinkLayerEthernet {
				ports = append(ports, pt)
			}
		}
		if len(ports) > 0 {
			h.Ports = ports
			out = append(out, h)
		}
	}
	return out
}

// podAddrs are the pod's addresses: those the runtime reports for the
// sandbox and, where the GID reader can list them, those of its network
// namespace (a secondary network's interfaces are not in the former).
func (p *Plugin) podAddrs(pod *api.PodSandbox) ([]netip.Addr, error) {
	var addrs []netip.Addr
	for _, ip := range pod.GetIps() {
		if a, err := netip.ParseAddr(ip); err == nil {
			addrs = append(addrs, a.Unmap())
		}
	}
	l, ok := p.cfg.GIDs.(PodAddrLister)
	if !ok {
		return addrs, nil
	}
	more, err := l.PodAddrs(pod)
	return append(addrs, more...), err
}

// podGIDIndex is the index of the RoCE v2 entry whose IPv4 address is one
// of the pod's, the same on every port (NCCL takes one index for all HCAs:
// NVIDIA/nccl issue 890). reason says why there is none.
func podGIDIndex(hcas []inventory.HCA, addrs []netip.Addr, addrErr error) (int, string) {
	byIndex := map[int][]string{}
	var missing, unread []string
	for _, h := range hcas {
		for _, pt := range h.Ports {
			name := fmt.Sprintf("%s/%d", h.Name, pt.Number)
			if pt.GIDError != "" {
				unread = append(unread, name+" ("+pt.GIDError+")")
				continue
			}
			i, ok := podEntry(pt.GIDs, addrs)
			if !ok {
				missing = append(missing, name)
				continue
			}
			byIndex[i] = append(byIndex[i], name)
		}
	}
	var why []string
	if len(unread) > 0 {
		why = append(why, "GID table not read on "+strings.Join(unread, ", "))
	}
	if len(missing) > 0 {
		m := "no RoCE v2 GID of the pod's IPv4 addresses (" + addrList(addrs) + ") on " + strings.Join(missing, ", ")
		if addrErr != nil {
			m += " (the pod's network namespace was not read: " + addrErr.Error() + ")"
		}
		why = append(why, m)
	}
	if len(byIndex) > 1 {
		why = append(why, "the pod's RoCE v2 GID index differs between ports: "+inventory.IndexList(byIndex)+" (NCCL takes one index for all)")
	}
	if len(why) > 0 {
		return 0, strings.Join(why, "; ")
	}
	for i := range byIndex {
		return i, ""
	}
	return 0, "no RoCE port"
}

// podEntry is the first RoCE v2 entry holding one of addrs.
func podEntry(gids []inventory.GIDEntry, addrs []netip.Addr) (int, bool) {
	for _, e := range gids {
		if a, v4 := e.IPv4(); v4 && e.Type == inventory.GIDTypeRoCEv2 && slices.Contains(addrs, a) {
			return e.Index, true
		}
	}
	return 0, false
}

func addrList(addrs []netip.Addr) string {
	var v4 []string
	for _, a := range addrs {
		if a.Is4() {
			v4 = append(v4, a.String())
		}
	}
	if len(v4) == 0 {
		return "none known"
	}
	return strings.Join(v4, ", ")
}

// PodAddrs implements PodAddrLister: the local IPv4 addresses of the
// network namespace of the pod's sandbox process, from
// <ProcRoot>/<pid>/net/fib_trie (the namespace's routing tables, where each
// local address is a "/32 host LOCAL" leaf). That file is readable without
// any capability, unlike entering the namespace (setns needs
// CAP_SYS_ADMIN, the agent drops every capability); RoCE v2 GIDs of IPv4
// addresses are all the GID index needs.
func (s SysfsGIDs) PodAddrs(pod *api.PodSandbox) ([]netip.Addr, error) {
	pid := pod.GetPid()
	if pid == 0 {
		return nil, errors.New("the runtime does not say the sandbox's process (NRI PodSandbox.pid)")
	}
	procRoot := s.ProcRoot
	if procRoot == "" {
		procRoot = "/proc"
	}
	file := filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10), "net", "fib_trie")
	b, err := discovery.ReadFile(file, fibTrieMaxBytes)
	if err != nil {
		return nil, fmt.Errorf("read the pod's addresses: %w", err)
	}
	return localAddrs(string(b)), nil
}

// fibTrieMaxBytes bounds the read of a pod's fib_trie: a pod's namespace
// has a few routes, about 100 bytes each.
const fibTrieMaxBytes = 1 << 20

// localAddrs reads the local addresses of a fib_trie: each "|-- a.b.c.d"
// leaf followed by a "/32 host LOCAL" line.
func localAddrs(fibTrie string) []netip.Addr {
	var out []netip.Addr
	var leaf netip.Addr
	for _, line := range strings.Split(fibTrie, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "|--":
			leaf, _ = netip.ParseAddr(f[len(f)-1])
		case len(f) == 3 && f[0] == "/32" && f[1] == "host" && f[2] == "LOCAL":
			if leaf.Is4() && !slices.Contains(out, leaf) {
				out = append(out, leaf)
			}
		}
	}
	return out
}
