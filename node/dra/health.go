package dra

import (
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/ibkube/ibkube/node/resource"
)

// HealthTimeout is how long the kubelet trusts a health report
// (DeviceHealth.HealthCheckTimeout); the driver resends the report every
// HealthResend, so two reports can be lost before a device shows Unknown.
const (
	HealthTimeout = 30 * time.Second
	HealthResend  = 10 * time.Second
)

// Health is the health report of every published device: an HCA is
// Unhealthy, with the reason as message, when its pool counts it unhealthy
// (the same rule that taints it in the slice).
func Health(m *resource.Model, node string, now time.Time) kubeletplugin.DeviceHealthReport {
	devs := Devices(m)
	r := kubeletplugin.DeviceHealthReport{Devices: make([]kubeletplugin.DeviceHealth, 0, len(devs))}
	for _, d := range devs {
		h := kubeletplugin.DeviceHealth{
			PoolName: node, DeviceName: d.Name, Health: kubeletplugin.HealthStatusHealthy,
			LastUpdated: now, HealthCheckTimeout: HealthTimeout,
		}
		if ok, why := d.Pool.Health(d.HCA); !ok {
			h.Health, h.Message = kubeletplugin.HealthStatusUnhealthy, why
		}
		r.Devices = append(r.Devices, h)
	}
	return r
}
