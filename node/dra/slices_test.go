package dra

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/internal/testing/nodetest"
	"github.com/ibkube/ibkube/node/config"
	"github.com/ibkube/ibkube/node/dra/slice"
	"github.com/ibkube/ibkube/node/resource"
)

// TestResourcesGolden pins the ResourceSlice content of real machines: the
// reviewer reads the diff of testdata/*.slices.json.
func TestResourcesGolden(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		fixture string
		cfg     *config.AgentConfig
	}{
		{fixture: fixture.NDv5},
		{fixture: fixture.NDv4},
		{fixture: fixture.OCIH100, cfg: roceConfig()},
		{fixture: fixture.Broken},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			t.Parallel()
			h := newHost(t, tc.fixture, tc.cfg)
			m := h.model(t)
			golden(t, tc.fixture+".slices.json", Resources(m, h.facts(t, m)))
		})
	}
}

// TestResourcesNDv5 states what the golden file holds, so that a wrong
// -update cannot hide it.
func TestResourcesNDv5(t *testing.T) {
	t.Parallel()
	h := newHost(t, fixture.NDv5, nil)
	m := h.model(t)
	res := Resources(m, h.facts(t, m))
	pool, ok := res.Pools["node-0"]
	if !ok || len(pool.Slices) != 2 || len(pool.Slices[0].Devices) != 0 || len(pool.Slices[1].SharedCounters) != 0 {
		t.Fatalf("pools = %v, want one pool node-0 with a slice of counters and a slice of devices", res.Pools)
	}
	var sets []string
	for _, cs := range pool.Slices[0].SharedCounters {
		for _, name := range slices.Sorted(maps.Keys(cs.Counters)) {
			v := cs.Counters[name].Value
			sets = append(sets, cs.Name+"/"+name+"="+v.String())
		}
	}
	if want := []string{"hcas/mlx5-0=1", "hcas/mlx5-1=1", "hcas/mlx5-2=1", "hcas/mlx5-3=1", "hcas/mlx5-4=1", "hcas/mlx5-5=1", "hcas/mlx5-6=1", "hcas/mlx5-7=1"}; !slices.Equal(sets, want) {
		t.Errorf("counters %v, want %v (one set, a counter per HCA, one unit for its one shared pool)", sets, want)
	}
	devs := map[string]resourceapi.Device{}
	var order []string
	for _, d := range pool.Slices[1].Devices {
		devs[d.Name] = d
		order = append(order, d.Name)
	}
	// The allocator takes the first devices that fit and evaluates the
	// class on each it passes: the first exclusive HCA, the sharers' first
	// HCA, then the other exclusive HCAs by NUMA node, then the other
	// shared devices from the other end.
	if want := []string{"ib-mlx5-0", "shared-ib-mlx5-7",
		"ib-mlx5-1", "ib-mlx5-2", "ib-mlx5-3", "ib-mlx5-4", "ib-mlx5-5", "ib-mlx5-6", "ib-mlx5-7",
		"shared-ib-mlx5-6", "shared-ib-mlx5-5", "shared-ib-mlx5-4", "shared-ib-mlx5-3", "shared-ib-mlx5-2", "shared-ib-mlx5-1", "shared-ib-mlx5-0"}; !slices.Equal(order, want) {
		t.Errorf("device order %v, want %v", order, want)
	}
	for name, d := range devs {
		hca := strings.TrimPrefix(strings.TrimPrefix(name, "shared-"), "ib-")
		want := []resourceapi.DeviceCounterConsumption{{CounterSet: contract.DRACounterSetHCAs, Counters: map[string]resourceapi.Counter{hca: {Value: apiresource.MustParse("1")}}}}
		if diff := cmp.Diff(want, d.ConsumesCounters); diff != "" {
			t.Errorf("%s consumes (-want +got):\n%s", name, diff)
		}
	}
	// 8 InfiniBand HCAs in each default pool; the Ethernet mlx5_8 in none.
	if len(devs) != 16 {
		t.Errorf("%d devices, want 16 (8 HCAs × rdma/shared_ib and rdma/ib)", len(devs))
	}
	ib, shared := devs["ib-mlx5-0"], devs["shared-ib-mlx5-0"]
	attr := func(d resourceapi.Device, name resourceapi.QualifiedName) string {
		a, ok := d.Attributes[name]
		switch {
		case !ok:
			return "<none>"
		case a.StringValue != nil:
			return *a.StringValue
		case a.IntValue != nil:
			return fmt.Sprint(*a.IntValue)
		}
		return "?"
	}
	for _, c := range []struct {
		name resourceapi.QualifiedName
		want string
	}{
		{contract.DRAAttrPool, "rdma/ib"},
		{contract.DRAAttrRDMADevice, "mlx5_0"},
		{contract.DRAAttrLinkLayer, "InfiniBand"},
		{contract.DRAAttrRate, "400"},
		{contract.DRAAttrVendorID, "15b3"},
		{contract.DRAAttrPartition, "0x800b"},
		{"resource.kubernetes.io/pciBusID", "0101:00:00.0"},
		{"resource.kubernetes.io/pcieRoot", "pci0101:00"},
		{"resource.kubernetes.io/numaNode", "0"},
	} {
		if got := attr(ib, c.name); got != c.want {
			t.Errorf("ib-mlx5-0 %s = %s, want %s", c.name, got, c.want)
		}
	}
	for _, r := range contract.DRARetiredAttributes() {
		if _, ok := ib.Attributes[resourceapi.QualifiedName(r.Name)]; ok {
			t.Errorf("ib-mlx5-0 publishes the retired %s", r.Name)
		}
	}
	if _, ok := ib.Attributes["portState"]; ok {
		t.Error("ib-mlx5-0 publishes portState: an attribute that flips with the fabric rewrites the slice")
	}
	if ib.AllowMultipleAllocations != nil || len(ib.Capacity) != 0 || len(ib.Taints) != 0 {
		t.Errorf("exclusive device ib-mlx5-0 = %+v, want no sharing, no capacity, no taint", ib)
	}
	if shared.AllowMultipleAllocations == nil || !*shared.AllowMultipleAllocations {
		t.Error("shared-ib-mlx5-0 does not allow multiple allocations")
	}
	slots := shared.Capacity[contract.DRACapacitySlots]
	if slots.Value.Value() != config.DefaultSharedSlots || slots.RequestPolicy == nil || slots.RequestPolicy.Default.Value() != 1 {
		t.Errorf("shared-ib-mlx5-0 slots = %+v, want %d with a default request of 1", slots, config.DefaultSharedSlots)
	}
	if got := attr(devs["ib-mlx5-4"], "resource.kubernetes.io/numaNode"); got != "1" {
		t.Errorf("ib-mlx5-4 numaNode = %s, want 1 (the second socket's four HCAs)", got)
	}
}

// TestResourcesValid checks every fixture's slices against the API's rules
// (k8s.io/api resource/v1 types.go): device names are DNS labels unique in
// the pool, at most ResourceSliceMaxDevices a slice, attribute names are C
// identifiers of at most 32 characters (with an optional DNS domain),
// string values at most 64 characters, at most 32 attributes and capacities
// per device, and a taint's key a qualified name.
func TestResourcesValid(t *testing.T) {
	t.Parallel()
	cIdent := regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,31}$`)
	for _, name := range fixture.Names() {
		h := newHost(t, name, nil)
		for _, cfg := range []*config.AgentConfig{config.Default(), roceConfig()} {
			h.cfg = cfg
			m := h.model(t)
			res := Resources(m, h.facts(t, m))
			seen := map[string]bool{}
			sets := map[string]resourceapi.CounterSet{}
			for _, s := range res.Pools["node-0"].Slices {
				if len(s.Devices) > 0 && len(s.SharedCounters) > 0 {
					t.Errorf("%s: a slice holds devices and counters; the API allows one of them", name)
				}
				if len(s.SharedCounters) > resourceapi.ResourceSliceMaxCounterSets {
					t.Errorf("%s: %d counter sets in a slice, max %d", name, len(s.SharedCounters), resourceapi.ResourceSliceMaxCounterSets)
				}
				for _, cs := range s.SharedCounters {
					if errs := validation.IsDNS1123Label(cs.Name); len(errs) > 0 || len(cs.Counters) > resourceapi.ResourceSliceMaxCountersPerCounterSet {
						t.Errorf("%s: counter set %q: %v, %d counters", name, cs.Name, errs, len(cs.Counters))
					}
					if _, dup := sets[cs.Name]; dup {
						t.Errorf("%s: counter set %q twice", name, cs.Name)
					}
					sets[cs.Name] = cs
				}
			}
			for _, s := range res.Pools["node-0"].Slices {
				// Every device consumes counters: 64 a slice, not 128.
				if len(s.Devices) > resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures {
					t.Errorf("%s: %d devices in a slice, max %d", name, len(s.Devices), resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures)
				}
				for _, d := range s.Devices {
					if errs := validation.IsDNS1123Label(d.Name); len(errs) > 0 || seen[d.Name] {
						t.Errorf("%s: device name %q: %v (duplicate: %v)", name, d.Name, errs, seen[d.Name])
					}
					seen[d.Name] = true
					if n := len(d.Attributes) + len(d.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
						t.Errorf("%s/%s: %d attributes and capacities", name, d.Name, n)
					}
					for an, av := range d.Attributes {
						domain, id, ok := strings.Cut(string(an), "/")
						if !ok {
							id, domain = domain, ""
						}
						if !cIdent.MatchString(id) || (domain != "" && len(validation.IsDNS1123Subdomain(domain)) > 0) {
							t.Errorf("%s/%s: attribute name %q", name, d.Name, an)
						}
						if av.StringValue != nil && len(*av.StringValue) > resourceapi.DeviceAttributeMaxValueLength {
							t.Errorf("%s/%s: %s is %d characters", name, d.Name, an, len(*av.StringValue))
						}
					}
					if len(d.ConsumesCounters) > resourceapi.ResourceSliceMaxDeviceCounterConsumptionsPerDevice {
						t.Errorf("%s/%s: %d counter consumptions", name, d.Name, len(d.ConsumesCounters))
					}
					for _, c := range d.ConsumesCounters {
						cs, ok := sets[c.CounterSet]
						for counter := range c.Counters {
							if _, found := cs.Counters[counter]; !ok || !found {
								t.Errorf("%s/%s consumes %s/%s, which the pool does not have", name, d.Name, c.CounterSet, counter)
							}
						}
					}
					for _, taint := range d.Taints {
						if errs := validation.IsQualifiedName(taint.Key); len(errs) > 0 {
							t.Errorf("%s/%s: taint key %q: %v", name, d.Name, taint.Key, errs)
						}
					}
				}
			}
		}
	}
}

func TestDeviceNames(t *testing.T) {
	t.Parallel()
	sel := config.DefaultSelector()
	for _, tc := range []struct {
		name  string
		pools []config.Pool
		want  []string
	}{
		{name: "defaults", pools: config.DefaultPools(), want: []string{"shared-ib-mlx5-0", "ib-mlx5-0"}},
		{
			name: "same name in two domains",
			pools: []config.Pool{
				{ResourceName: "example.com/ib", Mode: config.ModeExclusive, Selector: sel},
				{ResourceName: "rdma/ib", Mode: config.ModeShared, Slots: 4, Selector: sel},
			},
			want: []string{"ib-mlx5-0", "ib-1-mlx5-0"},
		},
		{
			name:  "too long for a DNS label",
			pools: []config.Pool{{ResourceName: "example.com/a_very_long_resource_name_that_goes_on_and_on_and_on_and_on", Mode: config.ModeExclusive, Selector: sel}},
			want:  []string{"a-very-long-resource-name-that-goes-on-and-on-and-on-and-on-mlx"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := config.Default()
			c.Pools = tc.pools
			h := newHost(t, fixture.HB, c)
			var got []string
			for _, d := range Devices(h.model(t)) {
				got = append(got, d.Name)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("device names (-want +got):\n%s", d)
			}
		})
	}
}

func TestPCIeRoot(t *testing.T) {
	t.Parallel()
	h := newHost(t, fixture.NDv5, nil)
	got, err := PCIeRoot(fixture.SysfsRoot(h.dir), "0105:00:00.0")
	if err != nil || got != "pci0105:00" {
		t.Errorf("PCIeRoot(0105:00:00.0) on the ND v5 fixture = %q, %v; want pci0105:00 (the VMBus host bridge)", got, err)
	}
	if _, err := PCIeRoot(fixture.SysfsRoot(h.dir), "0999:00:00.0"); err == nil {
		t.Error("PCIeRoot of an absent device gave no error")
	}
}

func TestRateGbps(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{
		"400 Gb/sec (4X NDR)": 400, "200 Gb/sec (4X HDR)": 200, "100 Gb/sec (2X HDR)": 100, "2.5 Gb/sec (1X SDR)": 2, "": 0, "fast": 0,
	} {
		got, ok := slice.RateGbps(in)
		if got != want || ok != (want > 0) {
			t.Errorf("RateGbps(%q) = %d, %v; want %d", in, got, ok, want)
		}
	}
}

// TestSlicesManyHCAs: a node with more HCAs than a counter set may hold
// (32) gets further sets ("hcas-1"), every device consuming a counter of a
// set that holds it, and slices within the API's limits.
func TestSlicesManyHCAs(t *testing.T) {
	t.Parallel()
	m := resource.Build(config.Default(), nodetest.IBNode(40, 20), resource.Options{HostDevRoot: "/dev"})
	counters := map[string]map[string]bool{}
	var devices int
	for _, s := range slice.Slices(m, slice.NodeFacts{Name: "node-0"}) {
		if len(s.SharedCounters) > resourceapi.ResourceSliceMaxCounterSets || len(s.Devices) > resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures {
			t.Errorf("a slice has %d counter sets and %d devices", len(s.SharedCounters), len(s.Devices))
		}
		for _, cs := range s.SharedCounters {
			if len(cs.Counters) > resourceapi.ResourceSliceMaxCountersPerCounterSet {
				t.Errorf("counter set %s has %d counters", cs.Name, len(cs.Counters))
			}
			counters[cs.Name] = map[string]bool{}
			for name := range cs.Counters {
				counters[cs.Name][name] = true
			}
		}
		for _, d := range s.Devices {
			devices++
			for _, c := range d.ConsumesCounters {
				for name := range c.Counters {
					if !counters[c.CounterSet][name] {
						t.Errorf("%s consumes %s/%s, which no counter slice before it holds", d.Name, c.CounterSet, name)
					}
				}
			}
		}
	}
	if len(counters) != 2 || len(counters["hcas"]) != 32 || len(counters["hcas-1"]) != 8 || devices != 80 {
		t.Errorf("counter sets %v, %d devices; want hcas (32) and hcas-1 (8), 80 devices", counters, devices)
	}
}
