package contract

import "testing"

func TestAlignedRequestNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		request  string
		pair     int
		rung     string
		gpu, hca bool
	}{
		{"gpu-0/pcie-root", 0, RungPCIeRoot, true, false},
		{"gpu-15/any", 15, RungAny, true, false},
		{"hca-3-1", 3, "", false, true},
		{"gpu-0", 0, "", false, false},           // the request, not a result's rung
		{"gpu-0/fastest", 0, "", false, false},   // no such rung
		{"gpu-x/numa-node", 0, "", false, false}, // no pair number
		{"hca-1", 0, "", false, false},
		{"hca-1-x", 0, "", false, false},
		{"gpus-unpaired", 0, "", false, false},
		{"container-0-request-0", 0, "", false, false},
	} {
		pair, rung, ok := AlignedRungOf(tc.request)
		if ok != tc.gpu || ok && (pair != tc.pair || rung != tc.rung) {
			t.Errorf("AlignedRungOf(%q) = %d, %q, %v; want %d, %q, %v", tc.request, pair, rung, ok, tc.pair, tc.rung, tc.gpu)
		}
		pair, ok = AlignedPairOf(tc.request)
		if ok != tc.hca || ok && pair != tc.pair {
			t.Errorf("AlignedPairOf(%q) = %d, %v; want %d, %v", tc.request, pair, ok, tc.pair, tc.hca)
		}
	}
}
