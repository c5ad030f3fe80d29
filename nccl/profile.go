// Package nccl holds ibkube's catalogue of NCCL/UCX settings profiles, shared
// by the admission webhook (which writes a profile's settings into the pod)
// and the node agent (which picks a profile by VM size and hands out the
// matching NCCL topology file).
package nccl

// Var is one environment variable setting of a profile.
type Var struct {
	Name  string `json:"name"`
	Value string `json:"value"`
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
