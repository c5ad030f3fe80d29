package discovery

import "github.com/ibkube/ibkube/hca/inventory"

// pciPlace is where a PCI function sits in the machine.
type pciPlace struct {
	addr string
	// chain is the function's directories under /sys/devices from its root
	// complex ("pci0000:00") down to itself ("0000:0c:00.0"); nil when
	// unknown.
	chain []string
	numa  int
}

// root is the function's PCIe root complex ("pci0000:00"); "" when
// unknown.
func (p pciPlace) root() string {
	if len(p.chain) == 0 {
		return ""
	}
	return p.chain[0]
}

// rootChain drops what lies above the root complex (on Hyper-V, the VMBus
// device each virtual PCI bus hangs from); nil when there is no root.
func rootChain(dirs []string) []string {
	for i, d := range dirs {
		if inventory.IsPCIRootComplex(d) {
			return dirs[i:]
		}
	}
	return nil
}

// nearness says how near two functions are: the affinity, and for a
// switch how many levels of the tree they share (deeper is nearer); ok is
// false when they share neither a root nor a known NUMA node.
func nearness(a, b pciPlace) (aff inventory.Affinity, depth int, ok bool) {
	common := 0
	for common < len(a.chain)-1 && common < len(b.chain)-1 && a.chain[common] == b.chain[common] {
		common++
	}
	switch {
	case common >= 2:
		// A bridge below the root is shared. A root port is a point-to-point
		// link, so two functions under one are behind a switch below it.
		return inventory.AffinitySwitch, common, true
	case common == 1:
		return inventory.AffinityRoot, common, true
	case a.numa >= 0 && a.numa == b.numa:
		return inventory.AffinityNUMA, 0, true
	}
	return "", 0, false
}

// partner returns the GPUs nearest the HCA at h: all of them at the
// nearest affinity and, behind switches, at the deepest common bridge; nil
// when no GPU is near at all.
func partner(h pciPlace, gpus []pciPlace) *inventory.GPUPartner {
	var best *inventory.GPUPartner
	bestDepth := 0
	for _, g := range gpus {
		aff, depth, ok := nearness(h, g)
		if !ok {
			continue
		}
		switch {
		case best == nil || aff.Rank() < best.Affinity.Rank() || aff == best.Affinity && depth > bestDepth:
			best, bestDepth = &inventory.GPUPartner{Affinity: aff, GPUs: []string{g.addr}}, depth
		case aff == best.Affinity && depth == bestDepth:
			best.GPUs = append(best.GPUs, g.addr)
		}
	}
	return best
}
