package resource

import (
	"strconv"

	"github.com/ibkube/ibkube/hca/inventory"
)

// Env variable names of the partition facts.
const (
	// EnvNCCLIBPKey is the index of the partition key in the port's table
	// that NCCL puts in each QP (src/transport/net_ib.cc: NCCL_PARAM(IbPkey,
	// "IB_PKEY", 0) becomes qpAttr.pkey_index); one index for every HCA.
	EnvNCCLIBPKey = "NCCL_IB_PKEY"
	// EnvUCXIBPKey is the partition UCX uses, without the membership bit
	// (openucx/ucx src/uct/ib/base/ib_iface.c "PKEY": "Should be between 0
	// and 0x7fff", parsed as "0x" and hex digits). Azure's HPC guide:
	// 0x800b is handed to UCX as 0x000b.
	EnvUCXIBPKey = "UCX_IB_PKEY"
)

// pkeyEnv hands the tenant partition of the held HCAs to NCCL and UCX:
// UCX_IB_PKEY whenever their ports share one tenant key, and NCCL_IB_PKEY
// when that key's index is the same on every port and not 0 (NCCL's
// default, so Azure's layout with the tenant key first needs nothing).
// Without one certain key nothing is set and both libraries keep their
// own choice: UCX the first full-membership key, NCCL index 0.
func pkeyEnv(_ *Pool, hcas []inventory.HCA, env map[string]string) {
	names := make([]string, len(hcas))
	for i, h := range hcas {
		names[i] = h.Name
	}
	part := inventory.HCAsPartition(hcas, names)
	if part.State != inventory.PartitionOK {
		return
	}
	env[EnvUCXIBPKey] = part.Key.UCX()
	if i, ok := inventory.TenantIndex(hcas, names, part.Key); ok && i != 0 {
		env[EnvNCCLIBPKey] = strconv.Itoa(i)
	}
}
