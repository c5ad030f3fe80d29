package dra

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/inventory"
)

// ReasonGPUAlignmentFellBack is the reason of the pod's Warning Event when
// pairs of its aligned claim took a lower rung than the node's topology
// offers.
const ReasonGPUAlignmentFellBack = "GPUAlignmentFellBack"

// hcaPlace is where one of a claim's HCAs sits.
type hcaPlace struct {
	name string
	root string // "" when unknown
	numa int    // inventory.UnknownNUMANode when unknown
	// partner is the HCA's nearest GPUs by the node's PCI tree.
	partner *inventory.GPUPartner
}

// gpuPlace is where one of a claim's GPUs sits, as far as known.
type gpuPlace struct {
	// id is the GPU's PCI address, else its device name in its driver's
	// slice.
	id   string
	root string
	numa int
}

// claimHCA and claimGPU are a claim's devices with the request each was
// allocated for ("hca-0-1", "gpu-0/pcie-root").
type claimHCA struct {
	request string
	place   hcaPlace
}

type claimGPU struct {
	request string
	place   gpuPlace
}

// Pair is one HCA of a claim and the claim's GPUs it is paired with.
type Pair struct {
	HCA string
	// GPUs are PCI addresses (device names where the address is unknown):
	// the aligned pair's GPU, or the claim's GPUs nearest the HCA, none
	// when none is near.
	GPUs []string
	// Near is a contract.Near* word.
	Near string
	// Rung is the rung its GPU took in an aligned claim; "" in any other
	// claim.
	Rung string
}

// nearness is how near g sits to h: one root, else one NUMA node, else
// none where both NUMA nodes are known (different nodes mean different
// roots), else unknown.
func nearness(h hcaPlace, g gpuPlace) string {
	switch {
	case h.root != "" && h.root == g.root:
		return contract.NearPCIeRoot
	case h.numa >= 0 && h.numa == g.numa:
		return contract.NearNUMANode
	case h.numa >= 0 && g.numa >= 0:
		return contract.NearNone
	}
	return contract.NearUnknown
}

// nearRank orders the Near words nearest first; unknown before none, so
// that a GPU that may be near is named rather than dropped.
func nearRank(word string) int {
	return slices.Index([]string{contract.NearPCIeRoot, contract.NearNUMANode, contract.NearUnknown, contract.NearNone}, word)
}

// claimPairs pairs each HCA of a claim, once, with the claim's GPUs: in an
// aligned claim with the GPU of its pair however near (the request names,
// contract.AlignedPairOf), otherwise with the claim's GPUs nearest it, none
// when none is near. No GPU, no pairs.
func claimPairs(hcas []claimHCA, gpus []claimGPU) []Pair {
	if len(gpus) == 0 {
		return nil
	}
	type pairGPU struct {
		place gpuPlace
		rung  string
	}
	ofPair := map[int]pairGPU{}
	for _, g := range gpus {
		if i, rung, ok := contract.AlignedRungOf(g.request); ok {
			ofPair[i] = pairGPU{g.place, rung}
		}
	}
	var out []Pair
	for _, h := range hcas {
		if slices.ContainsFunc(out, func(p Pair) bool { return p.HCA == h.place.name }) {
			continue // one HCA in two requests (a shared and an exclusive device)
		}
		if i, ok := contract.AlignedPairOf(h.request); ok {
			if g, ok := ofPair[i]; ok {
				out = append(out, Pair{HCA: h.place.name, GPUs: []string{g.place.id}, Near: nearness(h.place, g.place), Rung: g.rung})
				continue
			}
		}
		out = append(out, nearest(h.place, gpus))
	}
	return out
}

// nearest pairs h with every GPU at the nearest nearness any has.
func nearest(h hcaPlace, gpus []claimGPU) Pair {
	p := Pair{HCA: h.name, Near: contract.NearNone}
	for _, g := range gpus {
		near := nearness(h, g.place)
		switch r := nearRank(near); {
		case r < nearRank(p.Near):
			p.Near, p.GPUs = near, []string{g.place.id}
		case r == nearRank(p.Near) && near != contract.NearNone && !slices.Contains(p.GPUs, g.place.id):
			p.GPUs = append(p.GPUs, g.place.id)
		}
	}
	return p
}

// pairsValue is contract.EnvGPUPairs' value.
func pairsValue(pairs []Pair) string {
	entries := make([]string, 0, len(pairs))
	for _, p := range pairs {
		entries = append(entries, p.HCA+"="+strings.Join(p.GPUs, "+")+"/"+p.Near)
	}
	return strings.Join(entries, ",")
}

// partnersValue is contract.EnvGPUPartners' value: each HCA, once, with
// its partner; "" when none has one.
func partnersValue(hcas []claimHCA) string {
	var entries []string
	seen := map[string]bool{}
	for _, h := range hcas {
		p := h.place.partner
		if p == nil || seen[h.place.name] {
			continue
		}
		seen[h.place.name] = true
		entries = append(entries, h.place.name+"="+strings.Join(p.GPUs, "+")+"/"+string(p.Affinity))
	}
	return strings.Join(entries, ",")
}

// pairEnv is what the claim's CDI devices say of its pairs, as
// "NAME=value" entries: each device carries the whole claim's, so the
// container reads the same value whichever device the runtime applies
// last.
func pairEnv(hcas []claimHCA, pairs []Pair) []string {
	var env []string
	if len(pairs) > 0 {
		env = append(env, contract.EnvGPUPairs+"="+pairsValue(pairs))
	}
	if v := partnersValue(hcas); v != "" {
		env = append(env, contract.EnvGPUPartners+"="+v)
	}
	return env
}

// rungRank orders the aligned claim's rungs, best first; -1 for a word
// that is no rung.
func rungRank(rung string) int {
	return slices.Index(contract.Rungs(), rung)
}

// nodeBestRung is the best rung the node's topology offers any GPU+HCA
// pair: pcie-root where an HCA has a partner behind its root (a switch or
// the root itself), numa-node where one only shares a NUMA node, else any.
func nodeBestRung(hcas []inventory.HCA) string {
	best := contract.RungAny
	for _, h := range hcas {
		switch {
		case h.GPUPartner == nil:
		case h.GPUPartner.Affinity == inventory.AffinitySwitch || h.GPUPartner.Affinity == inventory.AffinityRoot:
			return contract.RungPCIeRoot
		case h.GPUPartner.Affinity == inventory.AffinityNUMA:
			best = contract.RungNUMANode
		}
	}
	return best
}

// fallback is the message of the pod's Event when pairs of an aligned
// claim took a rung below best, naming each such pair and its rung; ok is
// false when none did.
func fallback(claim string, pairs []Pair, best string) (message string, ok bool) {
	var fell []string
	for _, p := range pairs {
		if rungRank(p.Rung) > rungRank(best) {
			fell = append(fell, fmt.Sprintf("%s=%s/%s (rung %s)", p.HCA, strings.Join(p.GPUs, "+"), p.Near, p.Rung))
		}
	}
	if len(fell) == 0 {
		return "", false
	}
	return fmt.Sprintf("aligned claim %s: %d of %d HCAs got their GPU on a lower rung than %s, which this node's topology offers (ibkube node): %s; "+
		"no such pair was free for them when the claim was allocated, or the GPU driver publishes no %s",
		claim, len(fell), len(pairs), best, strings.Join(fell, ", "), rungAttribute(best)), true
}

// rungAttribute is the attribute a rung's constraint matches on.
func rungAttribute(rung string) string {
	if rung == contract.RungNUMANode {
		return "numaNode"
	}
	return "pcieRoot"
}
