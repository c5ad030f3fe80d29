package dra

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/fixture"
)

// recordingPublisher keeps what the driver publishes, in order.
type recordingPublisher struct {
	ch chan resourceslice.DriverResources
}

func newRecordingPublisher() *recordingPublisher {
	return &recordingPublisher{ch: make(chan resourceslice.DriverResources, 64)}
}

func (p *recordingPublisher) PublishResources(_ context.Context, r resourceslice.DriverResources) error {
	p.ch <- r
	return nil
}

func (p *recordingPublisher) next(t testing.TB) resourceslice.DriverResources {
	t.Helper()
	select {
	case r := <-p.ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("nothing published")
		return resourceslice.DriverResources{}
	}
}

// tainted lists the devices that carry the unhealthy taint.
func tainted(r resourceslice.DriverResources) []string {
	var out []string
	for _, s := range r.Pools["node-0"].Slices {
		for _, d := range s.Devices {
			for _, taint := range d.Taints {
				if taint.Key == contract.DRATaintUnhealthy && taint.Effect == resourceapi.DeviceTaintEffectNoSchedule {
					out = append(out, d.Name)
				}
			}
		}
	}
	return out
}

// unhealthy lists the report's Unhealthy devices with their messages.
func unhealthy(r kubeletplugin.DeviceHealthReport) map[string]string {
	out := map[string]string{}
	for _, d := range r.Devices {
		if d.Health != kubeletplugin.HealthStatusHealthy {
			out[d.DeviceName] = string(d.Health) + ": " + d.Message
		}
	}
	return out
}

// TestPortDownTaintsAndReports pulls mlx5_0's cable on the ND v5 fixture as
// the kernel shows it in sysfs, rescans as the agent does, and puts it back:
// both of mlx5_0's devices get the NoSchedule taint in the slice and show
// Unhealthy on the kubelet's health stream, and both clear again.
func TestPortDownTaintsAndReports(t *testing.T) {
	t.Parallel()
	h := newHost(t, fixture.NDv5, nil)
	d := newDriver(t, h, t.TempDir())
	pub := newRecordingPublisher()
	d.attach(pub)
	if got := tainted(pub.next(t)); len(got) != 0 {
		t.Fatalf("tainted at start: %v", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	reports := make(chan kubeletplugin.DeviceHealthReport)
	done := make(chan error, 1)
	go func() { done <- d.WatchHealthStatus(ctx, reports) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("WatchHealthStatus: %v", err)
		}
	}()
	first := <-reports
	if len(first.Devices) != 16 || len(unhealthy(first)) != 0 {
		t.Fatalf("first report: %d devices, unhealthy %v; want 16 healthy", len(first.Devices), unhealthy(first))
	}

	for _, step := range []struct {
		state   string
		tainted []string
		report  map[string]string
	}{
		{"DOWN", []string{"shared-ib-mlx5-0", "ib-mlx5-0"}, map[string]string{
			"shared-ib-mlx5-0": "Unhealthy: port 1 is DOWN (Polling)", "ib-mlx5-0": "Unhealthy: port 1 is DOWN (Polling)",
		}},
		{"ACTIVE", nil, map[string]string{}},
	} {
		if err := fixture.SetPortState(h.dir, "mlx5_0", 1, step.state); err != nil {
			t.Fatal(err)
		}
		d.Update(h.model(t))
		if diff := cmp.Diff(step.tainted, tainted(pub.next(t))); diff != "" {
			t.Errorf("port %s: tainted devices (-want +got):\n%s", step.state, diff)
		}
		if diff := cmp.Diff(step.report, unhealthy(<-reports)); diff != "" {
			t.Errorf("port %s: health report (-want +got):\n%s", step.state, diff)
		}
	}
}

func TestHealthReportTimes(t *testing.T) {
	t.Parallel()
	h := newHost(t, fixture.HB, nil)
	now := time.Date(2026, 11, 23, 15, 0, 0, 0, time.UTC)
	got := Health(h.model(t), "node-0", now)
	want := kubeletplugin.DeviceHealthReport{Devices: []kubeletplugin.DeviceHealth{
		{PoolName: "node-0", DeviceName: "shared-ib-mlx5-0", Health: kubeletplugin.HealthStatusHealthy, LastUpdated: now, HealthCheckTimeout: HealthTimeout},
		{PoolName: "node-0", DeviceName: "ib-mlx5-0", Health: kubeletplugin.HealthStatusHealthy, LastUpdated: now, HealthCheckTimeout: HealthTimeout},
	}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("health report (-want +got):\n%s", d)
	}
	if HealthResend*2 >= HealthTimeout {
		t.Errorf("resend %s: two lost reports would let the kubelet's %s lease lapse", HealthResend, HealthTimeout)
	}
}
