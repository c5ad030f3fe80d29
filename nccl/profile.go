// Package nccl holds ibkube's catalogue of NCCL/UCX settings profiles, shared
// by the admission webhook (which writes a profile's settings into the pod)
// and the node agent (which picks a profile by VM size and hands out the
// matching NCCL topology file).
package nccl

// Var is one environment variable setting of a profile.
type Var struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	// WholeNode marks a value that is right only for a container holding
	// all of the machine's GPUs (Profile.GPUsPerNode): the value comes from
	// a whole-machine test and assumes every GPU has its own HCA beside it,
	// which ibkube cannot promise for a container holding fewer GPUs.
	WholeNode bool `json:"wholeNode,omitempty"`
	// Source is where the value comes from: "owner/repo path:line" of a
	// public file (commits in docs/profiles.md). Empty for site profiles.
	Source string `json:"source,omitempty"`
}

// Profile is a named set of settings for one class of machine.
type Profile struct {
	// Name is what users write in the infiniband.azure.com/profile annotation.
	Name string `json:"name"`
	// Description says what hardware the profile is for.
	Description string `json:"description,omitempty"`
	// NCCL are NCCL_* settings. The webhook writes them into an NCCL conf
	// file, which NCCL reads with lower precedence than any environment
	// variable, so every value a user sets wins.
	NCCL []Var `json:"nccl,omitempty"`
	// Env are other variables (UCX_*, CUDA_*) that NCCL's conf file cannot
	// carry; the webhook adds them as container env only where the user
	// did not set them.
	Env []Var `json:"env,omitempty"`
	// TopologyFile names an NCCL topology XML (rendered by Topology) that the
	// node agent writes under its state dir for this machine class; empty if none.
	TopologyFile string `json:"topologyFile,omitempty"`
	// GPUsPerNode is the machine's GPU count; a container with exactly that
	// many GPUs holds the whole machine and gets the WholeNode values.
	// 0: unknown, WholeNode values are never written.
	GPUsPerNode int `json:"gpusPerNode,omitempty"`
	// HCAsPerGPU is how many HCAs rdma-exclusive gives per GPU when the pod
	// does not say (OCI BM.GPU.H100.8: 16 RoCE ports for 8 GPUs, 2). 0 means 1.
	HCAsPerGPU int `json:"hcasPerGPU,omitempty"`
	// ExclusiveResource is the rdma-exclusive resource on this machine class
	// when it differs from the webhook config's resources.exclusive (RoCE
	// nodes advertise their ports in a pool of their own, rdma/roce).
	ExclusiveResource string `json:"exclusiveResource,omitempty"`
	// GPUResource is the resource that counts this machine's GPUs when it
	// differs from the config's gpuResource (AMD GPUs: amd.com/gpu).
	GPUResource string `json:"gpuResource,omitempty"`
}

// Lookup returns the value of name in vars.
func Lookup(vars []Var, name string) (string, bool) {
	for _, v := range vars {
		if v.Name == name {
			return v.Value, true
		}
	}
	return "", false
}
