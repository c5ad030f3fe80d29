package fakegpu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/go-logr/logr"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/ibkube/ibkube/internal/atomicfile"
)

// Driver is the running fake GPU driver on one node.
type Driver struct {
	cdiDir string
	gpus   map[string]GPU
	log    logr.Logger
	helper *kubeletplugin.Helper
}

// Config says where the driver runs.
type Config struct {
	Client   kubernetes.Interface
	NodeName string
	GPUs     []GPU
	// CDIDir is where the runtime reads CDI specs (/var/run/cdi).
	CDIDir string
	// PluginDir and RegistryDir are the kubelet's plugin directories
	// (kubeletplugin's defaults under /var/lib/kubelet when empty).
	PluginDir, RegistryDir string
	Log                    logr.Logger
}

// Start registers the driver with the kubelet and publishes its GPUs in a
// ResourceSlice of the node. Stop undoes both.
func Start(ctx context.Context, c Config) (*Driver, error) {
	d := &Driver{cdiDir: c.CDIDir, gpus: map[string]GPU{}, log: c.Log}
	for _, g := range c.GPUs {
		d.gpus[g.Name()] = g
	}
	if err := os.MkdirAll(c.CDIDir, 0o755); err != nil {
		return nil, fmt.Errorf("CDI directory: %w", err)
	}
	opts := []kubeletplugin.Option{
		kubeletplugin.DriverName(DriverName),
		kubeletplugin.KubeClient(c.Client),
		kubeletplugin.NodeName(c.NodeName),
		// GPUs of this fake never change health.
		kubeletplugin.HealthService(false),
	}
	pluginDir := kubeletplugin.KubeletPluginsDir
	if c.PluginDir != "" {
		pluginDir = c.PluginDir
	}
	// kubeletplugin listens in its data directory but does not create it.
	dataDir := filepath.Join(pluginDir, DriverName)
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		return nil, fmt.Errorf("plugin directory: %w", err)
	}
	opts = append(opts, kubeletplugin.PluginDataDirectoryPath(dataDir))
	if c.RegistryDir != "" {
		opts = append(opts, kubeletplugin.RegistrarDirectoryPath(c.RegistryDir))
	}
	h, err := kubeletplugin.Start(logr.NewContext(ctx, c.Log), d, opts...)
	if err != nil {
		return nil, fmt.Errorf("start fake GPU driver: %w", err)
	}
	d.helper = h
	res := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		c.NodeName: {Slices: []resourceslice.Slice{{Devices: Devices(c.GPUs)}}},
	}}
	if err := h.PublishResources(ctx, res); err != nil {
		h.Stop()
		return nil, fmt.Errorf("publish fake GPUs: %w", err)
	}
	return d, nil
}

// Stop unregisters the driver; its ResourceSlice is removed by the helper.
func (d *Driver) Stop() { d.helper.Stop() }

// PrepareResourceClaims writes one CDI spec per claim with the claim's GPUs
// of this driver. Writing the same spec again is harmless, so a repeated call
// (the kubelet restarted) is answered the same way.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, claim := range claims {
		out[claim.UID] = d.prepare(claim)
	}
	return out, nil
}

func (d *Driver) prepare(claim *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	if claim.Status.Allocation == nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)}
	}
	var gpus []GPU
	var results []resourceapi.DeviceRequestAllocationResult
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != DriverName {
			continue
		}
		g, ok := d.gpus[r.Device]
		if !ok {
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s: device %s is not one of this node's fake GPUs", claim.Namespace, claim.Name, r.Device)}
		}
		gpus = append(gpus, g)
		results = append(results, r)
	}
	spec, ids, err := CDISpec(claim.UID, gpus)
	if err != nil {
		return kubeletplugin.PrepareResult{Err: err}
	}
	if err := atomicfile.Write(filepath.Join(d.cdiDir, CDIFile(claim.UID)), spec, 0o644); err != nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("write CDI spec: %w", err)}
	}
	var devs []kubeletplugin.Device
	for _, r := range results {
		devs = append(devs, kubeletplugin.Device{
			Requests:     []string{r.Request},
			PoolName:     r.Pool,
			DeviceName:   r.Device,
			CDIDeviceIDs: []string{ids[r.Device]},
		})
	}
	d.log.Info("prepared", "claim", claim.Namespace+"/"+claim.Name, "gpus", len(devs))
	return kubeletplugin.PrepareResult{Devices: devs}
}

// UnprepareResourceClaims removes the claims' CDI specs; one already gone is
// fine (a repeated call).
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := map[types.UID]error{}
	for _, c := range claims {
		err := os.Remove(filepath.Join(d.cdiDir, CDIFile(c.UID)))
		if errors.Is(err, os.ErrNotExist) {
			err = nil
		}
		out[c.UID] = err
	}
	return out, nil
}

// HandleError logs background errors (ResourceSlice publishing); the harness
// sees a missing slice as a failed wait.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	d.log.Error(err, msg)
}

// WatchHealthStatus is not offered (HealthService(false)).
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}
