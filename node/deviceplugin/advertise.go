package deviceplugin

import (
	"context"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

func (p *plugin) setPool(pool Pool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pool = pool
	p.advertiseLocked()
}

// setHeld takes a new answer of Holds and advertises what follows.
func (p *plugin) setHeld(held map[string]string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held = held
	p.advertiseLocked()
}

// advertiseLocked works out the device list from the pool and the holds
// and, when it differs from the last one, hands it to the streams. A shared
// pool whose every healthy HCA is held exclusively advertises its slots
// Unhealthy: Allocate would refuse a slot (AllocateShared), and the kubelet
// admits a pod only onto healthy devices, so the scheduler keeps shared
// pods off the node instead of the kubelet failing them at admission.
func (p *plugin) advertiseLocked() {
	devs := p.pool.Devices()
	allHeld := false
	if shared, ok := p.pool.(SharedPool); ok && p.guardsShared() && len(p.held) > 0 {
		allHeld = len(shared.SharedHCAs(p.held)) == 0 && slices.ContainsFunc(devs, func(d *pluginapi.Device) bool { return d.Health == pluginapi.Healthy })
	}
	if allHeld {
		out := make([]*pluginapi.Device, 0, len(devs))
		for _, d := range devs {
			d = proto.CloneOf(d)
			d.Health = pluginapi.Unhealthy
			out = append(out, d)
		}
		devs = out
	}
	if allHeld != p.allHeld {
		if allHeld {
			p.log.Info("every healthy HCA is held exclusively; shared slots advertised Unhealthy until one is free", "held", p.held)
		} else {
			p.log.Info("an HCA is free for sharers again; shared slots advertised as their HCAs' health says")
		}
		p.allHeld = allHeld
	}
	if p.devices != nil && equalDevices(p.devices, devs) {
		return
	}
	p.devices = devs
	close(p.changed)
	p.changed = make(chan struct{})
}

// guardsShared says whether this plugin serves shared slots that leave out
// exclusively held HCAs.
func (p *plugin) guardsShared() bool { return !p.exclusive && p.holds != nil }

// watchHolds asks Holds every period until ctx ends. An answer that cannot
// be had keeps the last one: a PodResources API that is briefly away
// neither hides nor frees every slot.
func (p *plugin) watchHolds(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	failing := false
	for {
		hctx, cancel := context.WithTimeout(ctx, holdsTimeout)
		held, err := p.holds.ExclusiveHolders(hctx)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			p.log.Error(err, "cannot list exclusively held HCAs; the shared slots' health stays as it was")
			failing = true
		case err == nil:
			failing = false
			p.setHeld(held)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func equalDevices(a, b []*pluginapi.Device) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func (p *plugin) current() (Pool, []*pluginapi.Device, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pool, p.devices, p.changed
}
