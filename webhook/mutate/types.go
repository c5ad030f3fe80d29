// Package mutate is the pure core of ibkube's admission webhook: given a pod,
// its namespace's metadata and the config, it mutates the pod in place and
// returns the RFC 6902 patch that turns the original into the result. No
// I/O, no clock, no client.
package mutate

import "github.com/ibkube/ibkube/contract"

// Namespace is the metadata of the pod's namespace the core needs.
type Namespace struct {
	Name        string
	Labels      map[string]string
	Annotations map[string]string
}

// PatchOp is one RFC 6902 JSON Patch operation.
type PatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// Result is what Mutate did.
type Result struct {
	// Patch turns the original pod JSON into the mutated pod; empty when
	// nothing changed.
	Patch []PatchOp
	// Warnings are admission warnings for the user.
	Warnings []string
	// Injected reports whether the pod is an ibkube pod (mode other than
	// none in an opted-in namespace), even if nothing was left to change.
	Injected bool
	// Mode is the effective mode (none when not injected).
	Mode contract.Mode
}

// Refusal is a denial: Error is the user-facing message, naming the
// annotation, the bad value and what is accepted.
type Refusal struct {
	Msg string
}

func (r *Refusal) Error() string { return r.Msg }
