package holds

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
// node's other HCAs too until one of the holders ends (SchedulerEffect).
type HeldTwice struct {
	HCA string
	// Exclusive and Shared are the claims holding it each way, by UID.
	Exclusive, Shared []types.UID
}

// SchedulerEffect is what an HCA held both ways does to the node's
// scheduling, in the words the agent's Event and `ibkube doctor` use
// (docs/dra-driver.md, "Held both ways").
const SchedulerEffect = "the scheduler sees its counter over-committed and allocates no rdma device of this node, " +
	"on any HCA, until one of those claims' pods ends"

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

// FindHeldTwice finds the HCAs held both ways among the prepared claims'
// holds, by HCA name; legacy exclusive devices resolve through m.
func FindHeldTwice(all map[types.UID]Holds, m *resource.Model) []HeldTwice {
	if m == nil {
		m = &resource.Model{}
	}
	byHCA := map[string]*HeldTwice{}
	at := func(hca string) *HeldTwice {
		if byHCA[hca] == nil {
			byHCA[hca] = &HeldTwice{HCA: hca}
		}
		return byHCA[hca]
	}
	for _, uid := range slices.Sorted(maps.Keys(all)) {
		h := all[uid]
		for _, hca := range h.ExclusiveHCAs(m) {
			at(hca).Exclusive = append(at(hca).Exclusive, uid)
		}
		for _, hca := range h.Shared {
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
