package nccl

// Built-in profile names.
const (
	GenericIB   = "generic-ib"
	NDv4        = "ndv4"
	NDv5        = "ndv5"
	HB          = "hb"
	OCIH100RoCE = "oci-h100-roce"
)

// Builtin returns the built-in profiles, a fresh copy each call so callers
// may modify it.
func Builtin() []Profile {
	return []Profile{
		{
			Name:        GenericIB,
			Description: "any InfiniBand fabric: NCCL defaults, nothing machine-specific",
		},
		{
			Name:        NDv4,
			Description: "Azure ND A100 v4 (ND96asr_v4, ND96amsr_A100_v4): 8 A100, 8 HDR IB VFs, 4 NUMA nodes",
			NCCL: []Var{
				// Azure/azhpc-images customizations/ndv4.sh writes it to /etc/nccl.conf.
				{Name: "NCCL_IB_PCI_RELAXED_ORDERING", Value: "1"},
				// Azure/aks-rdma-infiniband tests/scenarios/k8s/values.yaml.
				{Name: "NCCL_NET_GDR_LEVEL", Value: "SYS"},
			},
			Env: []Var{
				// Azure/aks-rdma-infiniband tests/scenarios/k8s/values.yaml.
				{Name: "CUDA_DEVICE_ORDER", Value: "PCI_BUS_ID"},
			},
			// Our rendering of the layout azhpc-images states in topology/ndv4-topo.xml
			// (NCCL_TOPO_FILE in ndv4.sh); see ndv4Machine.
			TopologyFile: "ndv4-topo.xml",
		},
		{
			Name:        NDv5,
			Description: "Azure ND H100 v5 (ND96isr_H100_v5): 8 H100, 8 NDR IB VFs, 2 NUMA nodes",
			NCCL: []Var{
				// Azure/azhpc-images customizations/ndv5.sh writes it to /etc/nccl.conf.
				{Name: "NCCL_IB_PCI_RELAXED_ORDERING", Value: "1"},
				// Azure/aks-rdma-infiniband tests/scenarios/k8s/values.yaml.
				{Name: "NCCL_NET_GDR_LEVEL", Value: "SYS"},
			},
			Env: []Var{
				// Azure/aks-rdma-infiniband tests/scenarios/k8s/values.yaml.
				{Name: "CUDA_DEVICE_ORDER", Value: "PCI_BUS_ID"},
			},
			// Our rendering of the layout azhpc-images states in topology/ndv5-topo.xml
			// (NCCL_TOPO_FILE in ndv5.sh); see ndv5Machine.
			TopologyFile: "ndv5-topo.xml",
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
		{
			Name:        OCIH100RoCE,
			Description: "OCI BM.GPU.H100.8: 8 H100, 16 ConnectX-7 ports running RoCEv2",
			NCCL: []Var{
				// oracle-quickstart/oci-hpc-oke docs/recommended-nccl-rccl-parameters-by-shape.md:
				// RoCEv2 GID index, traffic class and timeout for BM.GPU.H100.8.
				{Name: "NCCL_IB_GID_INDEX", Value: "3"},
				{Name: "NCCL_IB_TC", Value: "41"},
				{Name: "NCCL_IB_TIMEOUT", Value: "22"},
			},
		},
	}
}
