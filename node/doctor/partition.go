package doctor

import (
	"fmt"

	"github.com/ibkube/ibkube/hca/inventory"
)

// CheckPartition is the partition check's name.
const CheckPartition = "partition"

// checkPartition fails when the node's InfiniBand ports cannot say which
// tenant partition the node is in: ports that disagree, or ports holding
// the default key only, cannot reach the rest of their job (Azure's "Set up
// InfiniBand": only VMs of one scale set or availability set, whose ports
// share its tenant key, reach each other). The agent labels no partition on
// such a node, so job pods never land there.
func checkPartition(f Facts) Result {
	res := Result{Name: CheckPartition}
	p := inventory.NodePartition(f.Node)
	switch p.State {
	case inventory.PartitionOK:
		res.Status = Pass
		res.Message = fmt.Sprintf("tenant partition %s on every ACTIVE InfiniBand port (UCX_IB_PKEY=%s)", p.Key, p.Key.UCX())
	case inventory.PartitionNoInfiniBand:
		res.Status, res.Message = Pass, "no InfiniBand ports (RoCE and Ethernet have no partition keys)"
	case inventory.PartitionDefault:
		res.Status = Warn
		res.Message = "every InfiniBand port is in the default partition only (0xffff): right for a fabric without partitions"
		res.Fix = "on Azure every VM also holds its scale set's tenant key; if this is an Azure VM, its InfiniBand setup is incomplete"
	case inventory.PartitionNoActivePort:
		res.Status, res.Message = Warn, "no InfiniBand port is ACTIVE, so no partition is known yet"
		res.Fix = "see ports"
	case inventory.PartitionMultiple:
		res.Status, res.Message = Warn, p.Reason+": the node is labelled with none, and job placement treats it as on no partition"
		res.Fix = "leave each node's ports one tenant partition, or place its pods with annotation infiniband.azure.com/placement: any"
	default:
		res.Status, res.Message = Fail, string(p.State)+": "+p.Reason
		res.Fix = "ports without the tenant key reach no other node of the job: on Azure, redeploy the VM into its scale set " +
			"or availability set (or reboot it if the key never came); on UFM/OpenSM, add the ports' GUIDs to the partition"
	}
	return res
}
