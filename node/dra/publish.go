package dra

import (
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/ibkube/ibkube/node/resource"
)

// Every slice write wakes every pending DRA pod of the cluster (the
// scheduler requeues them on a ResourceSlice event), so the driver writes
// as little as it can while a port flaps:
//
//   - a port going down taints its HCA at once (the slice reaches the API
//     within the discovery poll, 500 ms);
//   - the taint stays until the HCA has been healthy for RecoverHold, so a
//     flapping port keeps one taint instead of a write per flap;
//   - any other change waits until MinPublishInterval has passed since the
//     last write, so a burst of changes is one write.
//
// The health stream to the kubelet is not held back: pods see their HCA
// Unhealthy and Healthy as it happens.
const (
	// DefaultRecoverHold matches the device plugin's pace for a bad link,
	// at most one Node status patch per 10 s.
	DefaultRecoverHold = 10 * time.Second
	// DefaultMinPublishInterval is dranet's pace for slice writes
	// (google/dranet #253: 2 s minimum interval).
	DefaultMinPublishInterval = 2 * time.Second
)

// damper remembers when each HCA was last seen unhealthy.
type damper struct {
	hold    time.Duration
	lastBad map[string]time.Time
}

// observe records the model's unhealthy HCAs at now and returns the HCAs
// that are healthy but still held tainted, and when the first of those
// holds ends (zero when none).
func (f *damper) observe(m *resource.Model, now time.Time) (held map[string]bool, until time.Time) {
	if f.lastBad == nil {
		f.lastBad = map[string]time.Time{}
	}
	present := map[string]bool{}
	for _, d := range Devices(m) {
		present[d.HCA.Name] = true
		if ok, _ := d.Pool.Health(d.HCA); !ok {
			f.lastBad[d.HCA.Name] = now
		}
	}
	for hca, at := range f.lastBad {
		end := at.Add(f.hold)
		if !present[hca] || !now.Before(end) {
			delete(f.lastBad, hca)
			continue
		}
		if at.Equal(now) {
			continue // unhealthy now: tainted anyway
		}
		if held == nil {
			held = map[string]bool{}
		}
		held[hca] = true
		if until.IsZero() || end.Before(until) {
			until = end
		}
	}
	return held, until
}

// publishDecision says whether to hand desired to the slice controller now
// and, if not, when to look again (zero: never, nothing to write).
func publishDecision(desired resourceslice.DriverResources, published *resourceslice.DriverResources, lastWrite, now time.Time, minInterval time.Duration) (write bool, retryAt time.Time) {
	switch {
	case published == nil:
		return true, time.Time{}
	case equality.Semantic.DeepEqual(desired, *published):
		return false, time.Time{}
	case addsTaint(*published, desired):
		return true, time.Time{}
	case !now.Before(lastWrite.Add(minInterval)):
		return true, time.Time{}
	}
	return false, lastWrite.Add(minInterval)
}

// addsTaint says whether a device of next carries a taint it did not carry
// in prev (or is new and tainted).
func addsTaint(prev, next resourceslice.DriverResources) bool {
	had := map[string][]string{}
	for pool, p := range prev.Pools {
		for _, s := range p.Slices {
			for _, d := range s.Devices {
				for _, t := range d.Taints {
					had[pool+"/"+d.Name] = append(had[pool+"/"+d.Name], t.Key+"="+string(t.Effect))
				}
			}
		}
	}
	for pool, p := range next.Pools {
		for _, s := range p.Slices {
			for _, d := range s.Devices {
				for _, t := range d.Taints {
					if !slices.Contains(had[pool+"/"+d.Name], t.Key+"="+string(t.Effect)) {
						return true
					}
				}
			}
		}
	}
	return false
}
