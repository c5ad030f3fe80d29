package resource

import (
	"fmt"
	"sort"
	"strings"

	"github.com/ibkube/ibkube/hca/inventory"
)

// AllocateShared answers a shared pool's allocation of slots ids like
// Allocate, leaving out the HCAs in heldBy (HCA name to the container
// holding it exclusively): the kubelet counts a shared and an exclusive
// resource apart, so without this a shared container would also reach the
// HCAs other containers were promised alone. It returns the HCAs granted.
// When every healthy HCA is held, it refuses: a shared container would get
// no HCA at all, or another's.
func (p *Pool) AllocateShared(ids []string, heldBy map[string]string) (Grant, []string, error) {
	if p.Exclusive() {
		return Grant{}, nil, fmt.Errorf("%s: AllocateShared on an exclusive pool", p.Resource)
	}
	for _, id := range ids {
		if n, ok := slotIndex(id); !ok || n >= p.Slots {
			return Grant{}, nil, fmt.Errorf("%s: unknown device %q; this node offers %s to %s", p.Resource, id, SlotID(0), SlotID(p.Slots-1))
		}
	}
	var hcas []inventory.HCA
	var names, held []string
	for _, h := range p.HCAs {
		if !p.healthy(h) {
			continue
		}
		if holder, ok := heldBy[h.Name]; ok {
			held = append(held, h.Name+" by "+holder)
			continue
		}
		hcas = append(hcas, h)
		names = append(names, h.Name)
	}
	if len(hcas) == 0 {
		if len(held) == 0 {
			return Grant{}, nil, fmt.Errorf("%s: no healthy HCA on this node", p.Resource)
		}
		sort.Strings(held)
		return Grant{}, nil, fmt.Errorf("%s: every healthy HCA on this node is held exclusively (%s); a shared container would share them, so it is refused", p.Resource, strings.Join(held, ", "))
	}
	return p.allocate(hcas), names, nil
}
