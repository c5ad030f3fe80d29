package doctor

import (
	"fmt"

	"github.com/ibkube/ibkube/hca/inventory"
)

// CheckGID is the RoCE GID index check's name.
const CheckGID = "roce-gid"

// checkGID says, for the RoCE ports the agent advertises, whether a pod
// holding them gets NCCL_IB_GID_INDEX from the node agent (the ports agree
// on a RoCE v2 IPv4 GID index) or relies on NCCL's own detection, which
// exists from NCCL 2.21.5 (older versions use GID 0, RoCE v1 link-local).
// The table is read now; a pod's own address (a CNI that gives the pod's
// interface on the port an IPv4 address) is known only once it runs, so a
// port without an IPv4 GID here is a warning, not a failure.
func checkGID(f Facts) Result {
	res := Result{Name: CheckGID}
	advertised := map[string]bool{}
	for _, a := range f.Advertised {
		for _, h := range a.HCAs {
			advertised[h] = true
		}
	}
	var hcas []inventory.HCA
	for _, h := range f.Node.HCAs {
		if advertised[h.Name] {
			hcas = append(hcas, h)
		}
	}
	d := inventory.DecideGIDIndex(hcas)
	switch {
	case !d.RoCE:
		res.Status, res.Message = Pass, "no advertised RoCE port (InfiniBand needs no GID index)"
	case d.Set:
		res.Status = Pass
		res.Message = fmt.Sprintf("every advertised RoCE port has its host's RoCE v2 IPv4 GID at index %d: NCCL >= 2.21.5 and UCX pick it themselves; a pod whose image holds an older NCCL gets NCCL_IB_GID_INDEX of the entry of its own address", d.Index)
	default:
		res.Status = Warn
		res.Message = d.Reason + ": NCCL >= 2.21.5 finds each port's entry itself; a pod whose image holds an older NCCL gets no NCCL_IB_GID_INDEX unless its own address has one entry on every port it holds (an older NCCL uses GID 0, RoCE v1 link-local, which does not route on RoCEv2)"
		res.Fix = "give each RoCE port's netdev (or the pod's interface on it) an IPv4 address, keep the pods on NCCL >= 2.21.5, or set NCCL_IB_GID_INDEX in the pod's env; `ibkube node` shows each port's index"
	}
	return res
}
