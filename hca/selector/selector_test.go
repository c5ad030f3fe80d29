package selector

import (
	"testing"

	"github.com/ibkube/ibkube/hca/inventory"
)

func hca(name, pci, vendor, device string, layers ...string) inventory.HCA {
	h := inventory.HCA{Name: name, PCIAddress: pci, VendorID: vendor, DeviceID: device}
	for i, l := range layers {
		h.Ports = append(h.Ports, inventory.Port{Number: i + 1, LinkLayer: l})
	}
	return h
}

func TestSelect(t *testing.T) {
	t.Parallel()
	ib := hca("mlx5_0", "0101:00:00.0", "15b3", "101c", "InfiniBand")
	eth := hca("mlx5_8", "6a7e:00:02.0", "15b3", "1016", "Ethernet")
	intel := hca("irdma0", "0000:3b:00.0", "8086", "1592", "Ethernet")
	noPorts := hca("mlx5_9", "0000:00:09.0", "15b3", "101c")
	ibOnly := Selector{Match: Match{Vendors: []string{"15b3"}, LinkLayers: []string{"InfiniBand"}}}
	tests := []struct {
		name   string
		sel    Selector
		hca    inventory.HCA
		ok     bool
		reason string
	}{
		{"empty selector takes all", Selector{}, intel, true, ""},
		{"IB selector takes IB HCA", ibOnly, ib, true, ""},
		{"IB selector refuses the Ethernet mlx5", ibOnly, eth, false, `pools[0].selector.linkLayers [InfiniBand] does not match Ethernet`},
		{"vendor refuses Intel", ibOnly, intel, false, `pools[0].selector.vendors [15b3] does not match "8086"`},
		{"no ports has no link layer", ibOnly, noPorts, false, `pools[0].selector.linkLayers [InfiniBand] does not match (no ports)`},
		{"device ID", Selector{Match: Match{DeviceIDs: []string{"101e"}}}, ib, false, `pools[0].selector.deviceIDs [101e] does not match "101c"`},
		{"name glob", Selector{Match: Match{Names: []string{"mlx5_[0-7]"}}}, ib, true, ""},
		{"name glob refuses", Selector{Match: Match{Names: []string{"mlx5_[0-7]"}}}, eth, false, `pools[0].selector.names [mlx5_[0-7]] does not match "mlx5_8"`},
		{"pci glob", Selector{Match: Match{PCIAddresses: []string{"01*:00:00.0"}}}, ib, true, ""},
		{"pci refuses", Selector{Match: Match{PCIAddresses: []string{"0102:00:00.0"}}}, ib, false, `pools[0].selector.pciAddresses [0102:00:00.0] does not match "0101:00:00.0"`},
		{"RoCE selector", Selector{Match: Match{LinkLayers: []string{"Ethernet"}}}, eth, true, ""},
		{"exclusion names the entry", Selector{Match: Match{Vendors: []string{"15b3"}}, Exclude: []Match{{PCIAddresses: []string{"9*"}}, {Names: []string{"mlx5_8"}}}}, eth, false, `pools[0].selector.exclude[1] matches (names [mlx5_8])`},
		{"exclusion that does not match keeps", Selector{Exclude: []Match{{Names: []string{"mlx5_8"}}}}, ib, true, ""},
		{"exclusion is a conjunction", Selector{Exclude: []Match{{Names: []string{"mlx5_0"}, LinkLayers: []string{"Ethernet"}}}}, ib, true, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ok, reason := tc.sel.Select("pools[0].selector", tc.hca)
			if ok != tc.ok || reason != tc.reason {
				t.Errorf("Select = %v, %q; want %v, %q", ok, reason, tc.ok, tc.reason)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		sel  Selector
		want string
	}{
		"valid":              {Selector{Match: Match{Vendors: []string{"15b3"}, DeviceIDs: []string{"101c"}, Names: []string{"mlx5_*"}, PCIAddresses: []string{"0101:00:00.0"}, LinkLayers: []string{"Ethernet"}}}, ""},
		"upper-case vendor":  {Selector{Match: Match{Vendors: []string{"15B3"}}}, `sel.vendors[0]: "15B3" is not a PCI vendor ID; accepted: four lower-case hex digits without 0x, e.g. 15b3`},
		"short device":       {Selector{Match: Match{DeviceIDs: []string{"1c"}}}, `sel.deviceIDs[0]: "1c" is not a PCI device ID; accepted: four lower-case hex digits without 0x, e.g. 101c`},
		"empty name":         {Selector{Match: Match{Names: []string{""}}}, `sel.names[0]: "" is not a valid name or glob (empty); accepted: a device name like mlx5_0 or a glob like mlx5_*`},
		"bad pci glob":       {Selector{Match: Match{PCIAddresses: []string{"[0101"}}}, `sel.pciAddresses[0]: "[0101" is not a valid PCI address or glob (syntax error in pattern); accepted: an address like 0101:00:00.0 or a glob like 01*:00:00.0`},
		"RoCE spelled lower": {Selector{Exclude: []Match{{LinkLayers: []string{"roce"}}}}, `sel.exclude[0].linkLayers[0]: "roce" is not a link layer; accepted: InfiniBand, Ethernet`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := tc.sel.Validate("sel")
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("Validate = %q, want %q", got, tc.want)
			}
		})
	}
}
