package nccl

import (
	"strconv"

	"github.com/ibkube/ibkube/contract"
)

// Built-in profile names.
const (
	GenericIB   = "generic-ib"
	NDv4        = "ndv4"
	NDv5        = "ndv5"
	NDv6GB      = "ndv6-gb"
	NDv5MI300X  = "ndv5-mi300x"
	HB          = "hb"
	OCIH100RoCE = "oci-h100-roce"
	OCIH200RoCE = "oci-h200-roce"
	OCIB4RoCE   = "oci-b4-roce"
)

// Sources of the values below; docs/profiles.md gives the commit each line
// number was read at.
const (
	srcNDv4       = "Azure/azhpc-images components/customizations/ndv4.sh"
	srcNDv5       = "Azure/azhpc-images components/customizations/ndv5.sh"
	srcAKSValues  = "Azure/aks-rdma-infiniband tests/scenarios/k8s/values.yaml"
	srcAKSMPIJob  = "Azure/aks-rdma-infiniband tests/scenarios/k8s/templates/mpi-job.yaml"
	srcAKSRCCLJob = "Azure/aks-rdma-infiniband tests/scenarios/k8s/templates/rccl-mpi-job.yaml"
	srcOCI        = "oracle-quickstart/oci-hpc-oke docs/recommended-nccl-rccl-parameters-by-shape.md"
)

// Builtin returns the built-in profiles, a fresh copy each call so callers
// may modify it.
//
// Values a source sets that no profile carries, and why (docs/profiles.md
// lists them per line): NCCL_TOPO_FILE and NCCL_IB_HCA are node facts the
// node agent supplies; NCCL_DEBUG is a logging choice, not a machine fact;
// NCCL_IB_GID_INDEX=3 on OCI is left to NCCL, which picks the RoCEv2 IPv4
// GID of each port itself when the variable is unset (NVIDIA/nccl
// src/transport/net_ib/connect.cc ncclIbGetGidIndex: NCCL_IB_GID_INDEX
// defaults to -1, then the GID table is searched for NCCL_IB_ADDR_FAMILY,
// default AF_INET, and NCCL_IB_ROCE_VERSION_NUM, default 2), whereas a fixed
// index names a different address once the port's netdev moves into a pod's
// network namespace, and disables those three selectors when a user sets
// them. For an image whose NCCL is older than 2.21.5 the node agent sets the
// index of the pod's own address (node/memlock Rules). No profile carries
// UCX_IB_GID_INDEX either: UCX picks the entry itself from 1.6, a set index
// also applies to InfiniBand ports, and with UCX_IB_ROCE_SUBNETS it is an
// error (openucx/ucx src/uct/ib/base/ib_iface.c).
func Builtin() []Profile {
	return append(azureProfiles(), ociProfiles()...)
}

// azureProfiles are the generic InfiniBand profile and Azure's machines.
func azureProfiles() []Profile {
	return []Profile{
		{
			Name:        GenericIB,
			Description: "any InfiniBand fabric: NCCL defaults, nothing machine-specific",
		},
		// Our rendering of the layout azhpc-images states in
		// topology/ndv4-topo.xml (NCCL_TOPO_FILE in ndv4.sh); see ndv4Machine.
		azureND(NDv4, "Azure ND A100 v4 (ND96asr_v4, ND96amsr_A100_v4): 8 A100, 8 HDR IB VFs, 4 NUMA nodes",
			srcNDv4, topologyNDv4),
		// The same for topology/ndv5-topo.xml and ndv5.sh; see ndv5Machine.
		azureND(NDv5, "Azure ND H100 v5 and ND H200 v5 (ND96isr_H100_v5, ND96isr_H200_v5): 8 GPUs, 8 NDR IB VFs, 2 NUMA nodes",
			srcNDv5, topologyNDv5),
		{
			// azhpc-images components/customizations/ndv6.sh (the "gb-family"
			// of setup_sku_customizations.sh) writes no nccl.conf and no
			// topology file, and aks-rdma-infiniband has no GB test: there is
			// no public value to carry, so the profile only sizes the machine.
			Name:        NDv6GB,
			Description: "Azure ND GB200 v6 and ND GB300 v6 (ND128isr_NDR_GB200_v6, ND128isr_GB300_v6): 4 GPUs, 4 IB HCAs; no public NCCL values",
			GPUsPerNode: 4,
		},
		{
			// azhpc-images components/customizations/ndv5_rocm.sh is a
			// placeholder, so the values are those of the AKS guide's RCCL
			// test, whose pods share the NCCL ConfigMap of values.yaml.
			Name:        NDv5MI300X,
			Description: "Azure ND MI300X v5 (ND96isr_MI300X_v5): 8 AMD MI300X (RCCL), 8 NDR IB HCAs",
			NCCL: []Var{
				{Name: "NCCL_NET_GDR_LEVEL", Value: "SYS", WholeNode: true, Source: srcAKSValues + ":33"},
			},
			Env: []Var{
				// RCCL_* is not an NCCL_* variable, so it goes to env.
				{Name: "RCCL_MSCCL_ENABLE", Value: "0", Source: srcAKSRCCLJob + ":57"},
			},
			GPUsPerNode: 8,
			GPUResource: "amd.com/gpu",
		},
		{
			Name:        HB,
			Description: "Azure HB-series (HB120rs_v2/v3, HB176rs_v4): CPU MPI over one HDR/NDR IB port, no GPUs",
			// No variables on purpose: MPI over UCX picks its transports itself
			// and the one IB port is node-specific (the node agent sets
			// UCX_NET_DEVICES). Public HB job scripts disagree on UCX_TLS
			// (rc, dc, ud,shm,rc), so ibkube sets none; a site can define it in
			// the config's profiles.
		},
	}
}

// ociProfiles are OCI's RoCE machines.
func ociProfiles() []Profile {
	return []Profile{
		{
			Name:              OCIH100RoCE,
			Description:       "OCI BM.GPU.H100.8: 8 H100, 16 ConnectX-7 ports running RoCEv2 (2 per GPU)",
			NCCL:              ociHopperNCCL(35),
			GPUsPerNode:       8,
			HCAsPerGPU:        2, // the 16 NCCL_IB_HCA entries of the source, line 38
			ExclusiveResource: contract.ResourceRoCE,
		},
		{
			Name:              OCIH200RoCE,
			Description:       "OCI BM.GPU.H200.8: 8 H200, 8 RoCEv2 ports for NCCL (1 per GPU)",
			NCCL:              ociHopperNCCL(50),
			GPUsPerNode:       8,
			HCAsPerGPU:        1, // the 8 NCCL_IB_HCA entries of the source, line 53
			ExclusiveResource: contract.ResourceRoCE,
		},
		{
			Name:        OCIB4RoCE,
			Description: "OCI BM.GPU.B4.8: 8 A100, 16 RoCEv2 ports (2 per GPU)",
			NCCL: []Var{
				{Name: "NCCL_IB_SPLIT_DATA_ON_QPS", Value: "0", Source: srcOCI + ":91"},
				{Name: "NCCL_IB_QPS_PER_CONNECTION", Value: "4", Source: srcOCI + ":92"},
				{Name: "NCCL_IB_TC", Value: "41", Source: srcOCI + ":95"},
				{Name: "NCCL_IB_SL", Value: "0", Source: srcOCI + ":96"},
				{Name: "NCCL_IB_TIMEOUT", Value: "22", Source: srcOCI + ":97"},
			},
			GPUsPerNode:       8,
			HCAsPerGPU:        2, // the 16 NCCL_IB_HCA entries of the source, line 94
			ExclusiveResource: contract.ResourceRoCE,
		},
	}
}

// ociHopperNCCL is the block the OCI guide gives its H100 and H200 shapes
// alike: the same settings at the same offsets from the block's first
// setting line, first.
func ociHopperNCCL(first int) []Var {
	line := func(offset int) string { return srcOCI + ":" + strconv.Itoa(first+offset) }
	return []Var{
		{Name: "NCCL_CUMEM_ENABLE", Value: "0", Source: line(0)},
		{Name: "NCCL_IB_SPLIT_DATA_ON_QPS", Value: "0", Source: line(1)},
		{Name: "NCCL_IB_TC", Value: "41", Source: line(4)},
		{Name: "NCCL_IB_SL", Value: "0", Source: line(5)},
		{Name: "NCCL_IB_TIMEOUT", Value: "22", Source: line(6)},
		{Name: "NCCL_SOCKET_IFNAME", Value: "eth0", Source: line(7)},
		{Name: "NCCL_IGNORE_CPU_AFFINITY", Value: "1", Source: line(8)},
	}
}

// azureND is an 8-GPU Azure ND profile: its azhpc-images script sets the
// same variables at the same lines for each such machine, and the AKS guide's
// MPI job the same for all of them.
func azureND(name, description, script, topologyFile string) Profile {
	return Profile{
		Name:        name,
		Description: description,
		NCCL: []Var{
			{Name: "NCCL_IB_PCI_RELAXED_ORDERING", Value: "1", Source: script + ":12"},
			{Name: "NCCL_IGNORE_CPU_AFFINITY", Value: "1", Source: script + ":14"},
			{Name: "NCCL_NET_GDR_LEVEL", Value: "SYS", WholeNode: true, Source: srcAKSValues + ":33"},
		},
		Env: []Var{
			{Name: "CUDA_DEVICE_ORDER", Value: "PCI_BUS_ID", Source: srcAKSMPIJob + ":52"},
		},
		TopologyFile: topologyFile,
		GPUsPerNode:  8,
	}
}
