package dra

import (
	"github.com/ibkube/ibkube/node/dra/holds"
)

// ReasonHCAHeldTwice is the reason of the node's Warning Event for an HCA
// held both ways (holds.HeldTwice).
const ReasonHCAHeldTwice = "HCAHeldTwice"

// reportHeldTwice sends an Event per HCA held both ways and sets the gauge;
// the agent calls it at start, before the kubelet can prepare anything.
func (d *Driver) reportHeldTwice() {
	l, err := d.store.holders()
	if err != nil {
		d.log.Error(err, "look for HCAs held both ways")
		return
	}
	for _, err := range l.Unreadable {
		d.log.Error(err, "a CDI spec of this driver cannot be read; it holds no HCA in Prepare's checks")
	}
	found := holds.FindHeldTwice(l.Holds, d.snapshot())
	d.metrics.heldTwice.Set(float64(len(found)))
	for _, h := range found {
		d.log.Info("an HCA is held both ways", "hca", h.HCA, "exclusive", h.Exclusive, "shared", h.Shared)
		d.nodeEvent(ReasonHCAHeldTwice, h.String()+"; "+holds.SchedulerEffect+` (docs/dra-driver.md, "Held both ways")`)
	}
}
