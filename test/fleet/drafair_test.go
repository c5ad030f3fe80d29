//go:build fleet

package fleet

import (
	"slices"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/internal/testing/dratest"
	"github.com/ibkube/ibkube/node/config"
)

// TestDRAFairShapes: the reference slice has the scheduler_perf shape (10
// devices, 4 attributes) and the GPU slice 8 GPUs carrying the standard
// PCIe attributes, one pool per node.
func TestDRAFairShapes(t *testing.T) {
	cases := []struct {
		name    string
		s       *resourceapi.ResourceSlice
		driver  string
		devices int
		attrs   []resourceapi.QualifiedName
	}{
		{"reference", dratest.RefSlice(refDriver, "n-1"), refDriver, 10, []resourceapi.QualifiedName{"model", "index", "healthy", "driverVersion"}},
		{"reference alone", dratest.RefSlice(refFirstDriver, "n-1"), refFirstDriver, 10, []resourceapi.QualifiedName{"model", "index", "healthy", "driverVersion"}},
		{"gpu", gpuSlice("n-1"), gpuDriver, 8, []resourceapi.QualifiedName{
			deviceattribute.StandardDeviceAttributePCIeRoot, deviceattribute.StandardDeviceAttributePCIBusID, "productName", "index"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := c.s.Spec
			if s.Driver != c.driver || *s.NodeName != "n-1" || s.Pool.Name != "n-1" || s.Pool.ResourceSliceCount != 1 || len(s.Devices) != c.devices {
				t.Fatalf("slice %s: driver %s node %s pool %+v, %d devices; want %s on n-1, one slice, %d devices", c.s.Name, s.Driver, *s.NodeName, s.Pool, len(s.Devices), c.driver, c.devices)
			}
			for _, d := range s.Devices {
				if len(d.Attributes) != len(c.attrs) {
					t.Errorf("%s has %d attributes, want %d", d.Name, len(d.Attributes), len(c.attrs))
				}
				for _, a := range c.attrs {
					if _, ok := d.Attributes[a]; !ok {
						t.Errorf("%s lacks %s", d.Name, a)
					}
				}
			}
		})
	}
}

// TestDRAFairDriverOrder: the allocator takes a node's pools sorted by
// driver name (k8s.io/dynamic-resource-allocation v0.37.2
// structured/internal/incubating sortPoolsByID, cmp.Compare on the
// name), so the reference-alone driver's pool comes before every other
// driver the phase puts on a node, and the fair reference's after them.
func TestDRAFairDriverOrder(t *testing.T) {
	order := []string{refFirstDriver, gpuDriver, contract.DRADriverName, refDriver}
	if !slices.IsSorted(order) {
		t.Errorf("drivers in pool order %v; want %s first and %s last", order, refFirstDriver, refDriver)
	}
}

func TestDRAFairRatioAndPods(t *testing.T) {
	tp := func(v float64) throughputResult { return throughputResult{PodsPerSecond: v} }
	for _, c := range []struct {
		a, b throughputResult
		want float64
	}{{tp(8), tp(10), 0.8}, {tp(0), tp(10), 0}, {tp(8), tp(0), 0}} {
		if got := ratio(c.a, c.b); got != c.want {
			t.Errorf("ratio(%v, %v) = %v, want %v", c.a.PodsPerSecond, c.b.PodsPerSecond, got, c.want)
		}
	}
	if got := draFairPods(1000, 4000); got != 1000 {
		t.Errorf("draFairPods(1000, 4000) = %d, want 1000", got)
	}
	if got := draFairPods(1000, 100); got != 60 {
		t.Errorf("draFairPods(1000, 100) = %d, want 60 (room for the sharers' HCA per node)", got)
	}
}

func TestSchedulerProfileURL(t *testing.T) {
	got, err := schedulerProfileURL("https://198.18.16.10:6443", 10*time.Second)
	if want := "https://198.18.16.10:10259/debug/pprof/profile?seconds=10"; err != nil || got != want {
		t.Errorf("got %q, %v; want %q", got, err, want)
	}
	if _, err := schedulerProfileURL("://bad", time.Second); err == nil {
		t.Error("a malformed API server address was accepted")
	}
}

// TestProcCPU: utime and stime (fields 14 and 15, proc(5)) of a
// /proc/PID/stat line, also behind a command name holding a space and a
// ')', which the parse must skip; lines cut short are errors.
func TestProcCPU(t *testing.T) {
	const tail = " S 1 1234 1234 0 -1 4194560 52345 0 12 0 4321 679 0 0 20 0 18 0 1000 1000000 10000 18446744073709551615"
	for _, c := range []struct {
		stat string
		want time.Duration
		ok   bool
	}{
		{"4242 (kube-scheduler)" + tail, 50 * time.Second, true},
		{"4242 (odd) name)" + tail, 50 * time.Second, true},
		{"4242 kube-scheduler S 1", 0, false},
		{"4242 (kube-scheduler) S 1 2", 0, false},
	} {
		got, err := procCPU(c.stat)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("procCPU(%.30q) = %v, %v; want %v (ok %v)", c.stat, got, err, c.want, c.ok)
		}
	}
}

// TestAgentConfigs: both configs a run can give its agents (FLEET_POOLS)
// pass the agent's own strict parse and validation.
func TestAgentConfigs(t *testing.T) {
	for name, y := range map[string][]byte{"default": agentConfigYAML, "split": agentConfigSplitYAML} {
		if _, err := config.Parse(y); err != nil {
			t.Errorf("FLEET_POOLS=%s: %v", name, err)
		}
	}
}
