package dra

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/ibkube/ibkube/hca/fixture"
)

// Publishing paces of the tests: short, so that the tests wait little, and
// apart, so that a test tells them apart.
const (
	testRecoverHold        = 300 * time.Millisecond
	testMinPublishInterval = 100 * time.Millisecond
)

// TestFlapBurstIsOneWrite flaps mlx5_0's port ten times, as discovery's
// rescans see it, ending down: the slice is written once for the whole
// burst, with the taint from the first down on (so it is there at the final
// down), and the taint clears in one more write once the port has stayed
// up for the hold.
func TestFlapBurstIsOneWrite(t *testing.T) {
	t.Parallel()
	h := newHost(t, fixture.NDv5, nil)
	reg := prometheus.NewRegistry()
	d, err := New(Config{NodeName: "node-0", CDIDir: t.TempDir(), RecoverHold: time.Hour, MinPublishInterval: testMinPublishInterval, Metrics: reg}, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	d.Update(h.model(t))
	pub := newRecordingPublisher()
	d.attach(pub)
	if got := tainted(pub.next(t)); len(got) != 0 {
		t.Fatalf("tainted at start: %v", got)
	}
	want := []string{"shared-ib-mlx5-0", "ib-mlx5-0"}
	for i := range 10 {
		state := "DOWN"
		if i%2 == 1 {
			state = "ACTIVE"
		}
		if err := fixture.SetPortState(h.dir, "mlx5_0", 1, state); err != nil {
			t.Fatal(err)
		}
		d.Update(h.model(t))
		if i == 0 {
			// The first down reaches the slice within the Update.
			select {
			case r := <-pub.ch:
				if diff := cmp.Diff(want, tainted(r)); diff != "" {
					t.Fatalf("first down: tainted (-want +got):\n%s", diff)
				}
			default:
				t.Fatal("the first down was not published at once")
			}
		}
	}
	if err := fixture.SetPortState(h.dir, "mlx5_0", 1, "DOWN"); err != nil {
		t.Fatal(err)
	}
	d.Update(h.model(t))
	// Nothing is held back for later (the port is down: no hold runs).
	d.mu.Lock()
	retryAt := d.retryAt
	d.mu.Unlock()
	if !retryAt.IsZero() {
		t.Errorf("a write is due at %v after the burst, want none", retryAt)
	}
	if len(pub.ch) != 0 {
		t.Errorf("%d more writes during the burst", len(pub.ch))
	}
	if n := testutil.ToFloat64(d.metrics.publishes); n != 2 {
		t.Errorf("ibkube_node_agent_dra_slice_publishes_total = %v, want 2 (start and the burst)", n)
	}
}

// TestTaintClearsAfterHold: a port back up clears the taint once it has
// stayed healthy for the hold, with no rescan needed, and not before.
func TestTaintClearsAfterHold(t *testing.T) {
	t.Parallel()
	h := newHost(t, fixture.NDv5, nil)
	d := newDriver(t, h, t.TempDir())
	pub := newRecordingPublisher()
	d.attach(pub)
	pub.next(t)
	if err := fixture.SetPortState(h.dir, "mlx5_2", 1, "DOWN"); err != nil {
		t.Fatal(err)
	}
	// Taken before Update, which reads the driver's clock inside it: the
	// driver's "last seen down" is no earlier than this, so the hold measured
	// from here is never shorter than the one the driver kept.
	down := time.Now()
	d.Update(h.model(t))
	if got := tainted(pub.next(t)); !slices.Equal(got, []string{"shared-ib-mlx5-2", "ib-mlx5-2"}) {
		t.Fatalf("port down: tainted %v", got)
	}
	if err := fixture.SetPortState(h.dir, "mlx5_2", 1, "ACTIVE"); err != nil {
		t.Fatal(err)
	}
	d.Update(h.model(t))
	r := pub.next(t)
	if got := tainted(r); len(got) != 0 {
		t.Errorf("after the hold: tainted %v", got)
	}
	if held := time.Since(down); held < testRecoverHold*9/10 {
		t.Errorf("taint cleared %s after the port was last seen down, want the hold of %s", held, testRecoverHold)
	}
}

// TestPublishDecision holds the rules: the first content and a new taint go
// at once; other changes wait for the interval; the same content never goes.
func TestPublishDecision(t *testing.T) {
	t.Parallel()
	h := newHost(t, fixture.NDv5, nil)
	m := h.model(t)
	clean := Resources(m, NodeFacts{Name: "node-0"})
	heldMlx0 := Resources(m, NodeFacts{Name: "node-0", Held: map[string]bool{"mlx5_0": true}})
	t0 := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name         string
		desired      any
		published    any
		now          time.Time
		write        bool
		retryAtAfter time.Duration
	}{
		{"first", clean, nil, t0, true, 0},
		{"unchanged", clean, clean, t0, false, 0},
		{"new taint within the interval", heldMlx0, clean, t0.Add(time.Millisecond), true, 0},
		{"cleared taint within the interval", clean, heldMlx0, t0.Add(time.Millisecond), false, time.Second},
		{"cleared taint after the interval", clean, heldMlx0, t0.Add(time.Second), true, 0},
	} {
		desired := tc.desired.(resourceslice.DriverResources)
		var published *resourceslice.DriverResources
		if tc.published != nil {
			p := tc.published.(resourceslice.DriverResources)
			published = &p
		}
		write, retryAt := publishDecision(desired, published, t0, tc.now, time.Second)
		var wantRetry time.Time
		if tc.retryAtAfter > 0 {
			wantRetry = t0.Add(tc.retryAtAfter)
		}
		if write != tc.write || !retryAt.Equal(wantRetry) {
			t.Errorf("%s: write %t, retry at %v; want %t, %v", tc.name, write, retryAt, tc.write, wantRetry)
		}
	}
}

// TestSliceErrorIsAnEventAndAMetric: what the slice controller reports (the
// API server refused a slice) is counted and sent as a node Event; other
// background errors are not.
func TestSliceErrorIsAnEventAndAMetric(t *testing.T) {
	t.Parallel()
	events := &eventLog{}
	d, err := New(Config{NodeName: "node-0", CDIDir: t.TempDir(), Events: events, Metrics: prometheus.NewRegistry()}, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	refused := fmt.Errorf("create resource slice: %w", errors.New(`ResourceSlice.resource.k8s.io "x" is invalid: spec.devices: Too many: 65: must have at most 64 items`))
	d.HandleError(context.Background(), fmt.Errorf("%w: %w", kubeletplugin.ErrRecoverable, refused), "processing ResourceSlice objects")
	d.HandleError(context.Background(), fmt.Errorf("%w: stale", kubeletplugin.ErrRecoverable), "device health reports are stale, WatchHealthStatus must re-send within each device's HealthCheckTimeout")
	if n := testutil.ToFloat64(d.metrics.sliceErrors); n != 1 {
		t.Errorf("ibkube_node_agent_dra_slice_errors_total = %v, want 1", n)
	}
	if len(events.events) != 1 || !strings.HasPrefix(events.events[0], ReasonSliceRejected+": processing ResourceSlice objects: ") || !strings.Contains(events.events[0], "at most 64") {
		t.Errorf("events %v, want one %s with the API server's reason", events.events, ReasonSliceRejected)
	}
}
