package dra

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ibkube/ibkube/node/resource"
)

// HeldTwice is an HCA that prepared claims hold in ways that exclude each
// other: exclusively by one claim and by any other claim besides. Prepare
// refuses to make one and the HCA's shared counter keeps the scheduler from
// allocating one, so it comes from before either: claims prepared by an
// agent before HCA holds, or allocated over slices before the counters.
// The scheduler then sees the HCA's counter over-committed (below zero),
// and its allocator (v1.37.2 checkAvailableCounters) refuses every device
// of the pool that consumes a counter, so rdma/ib stays Pending on all the
// node's other HCAs too until one of the holders ends.
type HeldTwice struct {
	HCA string
	// Exclusive and Shared are the claims holding it each way, by UID.
	Exclusive, Shared []types.UID
}

func (h HeldTwice) String() string {
	return fmt.Sprintf("HCA %s is held exclusively by claim %s and also by claim %s",
		h.HCA, joinUIDs(h.Exclusive[:1]), joinUIDs(append(slices.Clone(h.Exclusive[1:]), h.Shared...)))
}

func joinUIDs(uids []types.UID) string {
	s := make([]string, len(uids))
	for i, u := range uids {
		s[i] = string(u)
	}
	return strings.Join(s, ", ")
}

// heldTwice finds the HCAs held both ways among the prepared claims'
// holds, by HCA name; legacy exclusive devices resolve through m.
func heldTwice(all map[types.UID]holds, m *resource.Model) []HeldTwice {
	byHCA := map[string]*HeldTwice{}
	at := func(hca string) *HeldTwice {
		if byHCA[hca] == nil {
			byHCA[hca] = &HeldTwice{HCA: hca}
		}
		return byHCA[hca]
	}
	for _, uid := range slices.Sorted(maps.Keys(all)) {
		h := all[uid]
		for _, hca := range exclusiveHCAs(h, m) {
			at(hca).Exclusive = append(at(hca).Exclusive, uid)
		}
		for _, hca := range h.shared {
			at(hca).Shared = append(at(hca).Shared, uid)
		}
	}
	var out []HeldTwice
	for _, hca := range slices.Sorted(maps.Keys(byHCA)) {
		h := byHCA[hca]
		if len(h.Exclusive) > 0 && len(h.Exclusive)+len(h.Shared) > 1 {
			out = append(out, *h)
		}
	}
	return out
}

// exclusiveHCAs are the HCAs a claim holds exclusively, its legacy
// device-named holds included.
func exclusiveHCAs(h holds, m *resource.Model) []string {
	out := slices.Clone(h.exclusive)
	for _, name := range h.legacyDevices {
		if dev, err := lookup(m, name); err == nil && !slices.Contains(out, dev.HCA.Name) {
			out = append(out, dev.HCA.Name)
		}
	}
	return out
}

// HeldTwiceIn reads the CDI specs this driver wrote in dir and returns the
// HCAs held both ways (m resolves specs of agents before HCA holds; nil
// skips those). `ibkube doctor` and the agent's start use it.
func HeldTwiceIn(dir string, m *resource.Model) ([]HeldTwice, error) {
	all, err := specStore{dir: dir}.holders()
	if err != nil {
		return nil, err
	}
	if m == nil {
		m = &resource.Model{}
	}
	return heldTwice(all, m), nil
}

// ReasonHCAHeldTwice is the reason of the node's Warning Event for an HCA
// held both ways.
const ReasonHCAHeldTwice = "HCAHeldTwice"

// reportHeldTwice sends an Event per HCA held both ways and sets the gauge;
// the agent calls it at start, before the kubelet can prepare anything.
func (d *Driver) reportHeldTwice() {
	found, err := HeldTwiceIn(d.cfg.CDIDir, d.snapshot())
	if err != nil {
		d.log.Error(err, "look for HCAs held both ways")
		return
	}
	d.metrics.heldTwice.Set(float64(len(found)))
	for _, h := range found {
		d.log.Info("an HCA is held both ways", "hca", h.HCA, "exclusive", h.Exclusive, "shared", h.Shared)
		d.nodeEvent(ReasonHCAHeldTwice, h.String()+
			"; the scheduler sees its counter over-committed and allocates no rdma device of this node until one of those pods ends (docs/dra-driver.md, \"Held both ways\")")
	}
}
