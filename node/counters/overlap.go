package counters

import (
	"context"
	"fmt"
	"sort"
	"strings"
)

// ReasonExclusiveShared is the node Event that names an HCA held
// exclusively by one container and reachable by sharers at once.
const ReasonExclusiveShared = "RDMAExclusiveShared"

// Overlap is an HCA that one container holds exclusively while others
// reach it through a shared resource. The device plugin API cannot stop
// it when the exclusive container is admitted after the sharers (the
// kubelet counts the two resources apart), so the agent reports it.
type Overlap struct {
	HCA       string
	Exclusive string
	// Sharers are the other containers reaching the HCA, sorted.
	Sharers []string
}

// Message is what the Event and ibkube doctor say.
func (o Overlap) Message() string {
	return fmt.Sprintf("HCA %s is held exclusively by %s and shared by %s", o.HCA, o.Exclusive, strings.Join(o.Sharers, ", "))
}

// Overlaps finds every HCA held exclusively by one holder and reached by
// others through a shared resource, sorted by HCA. (Two exclusive holders
// of one HCA cannot come from the kubelet, which hands a device plugin's
// device to one container, nor from the DRA driver, which refuses it at
// Prepare.)
func Overlaps(hs []Holder) []Overlap {
	shared := map[string][]string{}
	for _, h := range hs {
		for _, n := range h.Shared {
			shared[n] = append(shared[n], h.ID())
		}
	}
	var out []Overlap
	for hca, owner := range ExclusiveOwners(hs) {
		var others []string
		for _, id := range shared[hca] {
			if id != owner.ID() { // a container reaching its own HCA twice is no overlap
				others = append(others, id)
			}
		}
		if len(others) == 0 {
			continue
		}
		sort.Strings(others)
		out = append(out, Overlap{HCA: hca, Exclusive: owner.ID(), Sharers: others})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].HCA < out[j].HCA })
	return out
}

// ExclusiveHolds answers which HCAs containers hold exclusively, from the
// kubelet's PodResources API: what the device plugin's shared slots leave
// out (deviceplugin.Holds).
type ExclusiveHolds struct {
	Lister Lister
	// Attribution is the agent's current pools and DRA devices.
	Attribution func() Attribution
}

// ExclusiveHolders maps each exclusively held HCA to its holder's
// namespace/pod/container.
func (e ExclusiveHolds) ExclusiveHolders(ctx context.Context) (map[string]string, error) {
	cs, err := e.Lister.List(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for hca, h := range ExclusiveOwners(Holders(cs, e.Attribution())) {
		out[hca] = h.ID()
	}
	return out, nil
}
