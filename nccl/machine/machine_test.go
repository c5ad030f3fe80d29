package machine

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestForSKU(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sku  string
		want Facts
		ok   bool
	}{
		{"Standard_ND96isr_H100_v5", Facts{Profile: "ndv5", TopologyFile: "ndv5-topo.xml"}, true},
		{"Standard_HB120rs_v3", Facts{Profile: "hb"}, true},
		{"Standard_D4s_v5", Facts{}, false},
		{"", Facts{}, false},
	} {
		got, ok := ForSKU(tc.sku)
		if ok != tc.ok {
			t.Errorf("ForSKU(%q) ok = %v, want %v", tc.sku, ok, tc.ok)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("ForSKU(%q) (-want +got):\n%s", tc.sku, diff)
		}
	}
	if _, err := Topology("ndv5-topo.xml"); err != nil {
		t.Errorf("Topology(ndv5-topo.xml): %v", err)
	}
}
