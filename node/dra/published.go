package dra

import (
	"context"
	"fmt"
	"net"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/ibkube/ibkube/contract"
)

// Published blocks until the API server holds this node's ResourceSlices
// with every device (and device taint) the driver last handed to the
// kubelet plugin library, or ctx ends.
// The kubelet plugin library publishes in the background, so without this
// the agent would report Ready while the scheduler still sees no devices on
// the node: pods sent there meanwhile fail with "cannot allocate all claims"
// and a DaemonSet rollout moves on to the next nodes early. It reads what
// the library's slice controller's informer has seen (sliceView), so
// waiting costs the API server nothing.
func (d *Driver) Published(ctx context.Context) error {
	if d.cfg.Plugin.Client == nil {
		return fmt.Errorf("DRA driver: no API client to see the node's ResourceSlices")
	}
	for {
		// What the driver last handed the slice controller; nil while the
		// first write waits on the publishing rules.
		d.mu.Lock()
		var want []string
		handed := d.published != nil
		if handed {
			want = publishedDevices(*d.published)
		}
		d.mu.Unlock()
		if d.seen(ctx, want, handed) {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// seen waits until the informer's view holds want (when handed), until
// ctx ends, or until publishedRecheck has passed: what the driver hands
// the controller can change without the view changing.
func (d *Driver) seen(ctx context.Context, want []string, handed bool) bool {
	got, changed := d.view.snapshot()
	if handed && slices.Equal(got, want) {
		return true
	}
	select {
	case <-ctx.Done():
	case <-changed:
	case <-time.After(publishedRecheck):
	}
	return false
}

// publishedRecheck is how often Published looks again at what the driver
// handed the controller (local state, no API request).
const publishedRecheck = 200 * time.Millisecond

// publishedDevices is the sorted list of "device taint,taint..." entries of
// the node's pool: what the scheduler sees of it.
func publishedDevices(res resourceslice.DriverResources) []string {
	var out []string
	for _, p := range res.Pools {
		for _, s := range p.Slices {
			out = append(out, deviceKeys(s.Devices)...)
		}
	}
	slices.Sort(out)
	return out
}

func deviceKeys(devs []resourceapi.Device) []string {
	out := make([]string, 0, len(devs))
	for _, dev := range devs {
		keys := []string{dev.Name}
		for _, t := range dev.Taints {
			keys = append(keys, t.Key)
		}
		slices.Sort(keys[1:])
		out = append(out, strings.Join(keys, " "))
	}
	return out
}

// stoppingResources is res with a NoSchedule taint DRATaintAgentStopped on
// every device: what a planned exit publishes, so the scheduler stops
// allocating the node's devices while no driver serves them. Running pods
// keep theirs.
func stoppingResources(res resourceslice.DriverResources) resourceslice.DriverResources {
	out := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{}}
	for name, p := range res.Pools {
		cp := p
		cp.Slices = nil
		for _, s := range p.Slices {
			devs := make([]resourceapi.Device, len(s.Devices))
			for i, dev := range s.Devices {
				dev.Taints = append(slices.Clone(dev.Taints), resourceapi.DeviceTaint{Key: contract.DRATaintAgentStopped, Effect: resourceapi.DeviceTaintEffectNoSchedule})
				devs[i] = dev
			}
			// The slice as it was (shared counters and all), its devices
			// tainted.
			s.Devices = devs
			cp.Slices = append(cp.Slices, s)
		}
		out.Pools[name] = cp
	}
	return out
}

// DefaultExitTimeout bounds how long a planned exit waits for its tainted
// slices to reach the API server (PluginOptions.ExitTimeout): well inside the
// pod's termination grace period (30 s by default).
const DefaultExitTimeout = 5 * time.Second

// drainOnExit publishes the node's devices tainted DRATaintAgentStopped and
// waits until the API server holds them, unless another instance of the
// driver (a rolling update's successor) serves the node: the kubelet keeps a
// gone driver's slices for 30 s before wiping them, and a pod the scheduler
// sends to them meanwhile waits on a driver that is not there (reported
// upstream as kubernetes issue 141912). The next instance publishes the devices untainted.
func (d *Driver) drainOnExit(p Publisher, o PluginOptions) {
	if o.PodUID != "" && successorServes(o.RegistryDir, types.UID(o.PodUID)) {
		d.log.Info("another instance of the driver serves the node; leaving the slices to it")
		return
	}
	timeout := o.ExitTimeout
	if timeout == 0 {
		timeout = DefaultExitTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	d.mu.Lock()
	res := stoppingResources(Resources(d.model, NodeFacts{Name: d.cfg.NodeName}))
	d.mu.Unlock()
	if err := p.PublishResources(ctx, res); err != nil {
		d.log.Error(err, "publish the stopping taint")
		return
	}
	want := publishedDevices(res)
	for !d.seen(ctx, want, true) {
		if ctx.Err() != nil {
			d.log.Info("exit: the stopping taint did not reach the API server in time", "timeout", timeout)
			return
		}
	}
	d.log.Info("devices tainted for the exit", "taint", contract.DRATaintAgentStopped)
}

// successorServes says whether another rolling-update instance of the
// driver has a live registration socket in registryDir.
func successorServes(registryDir string, self types.UID) bool {
	own := kubeletplugin.RollingUpdateRegistrarSocketFile(registryDir, contract.DRADriverName, self)
	entries, err := os.ReadDir(registryDir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		n := e.Name()
		if n == own || !strings.HasPrefix(n, contract.DRADriverName+"-") || !strings.HasSuffix(n, "-reg.sock") {
			continue
		}
		c, err := net.DialTimeout("unix", path.Join(registryDir, n), time.Second)
		if err == nil {
			c.Close()
			return true
		}
	}
	return false
}
