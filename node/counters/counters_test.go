package counters

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/ibkube/ibkube/hca/fixture"
)

func TestDelta(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		prev, cur  uint64
		w          Width
		want       uint64
		wantChange Change
	}{
		{"rose", 100, 250, WidthUnknown, 150, Rose},
		{"still", 7, 7, Width64, 0, Rose},
		// A 32-bit legacy port_xmit_data passing 2^32: 6 units before the top, 5 after.
		{"32-bit wrap", math.MaxUint32 - 5, 5, WidthUnknown, 11, Wrapped},
		{"32-bit wrap from the top", math.MaxUint32, 0, WidthUnknown, 1, Wrapped},
		// Above 2^32 the counter can only be 64-bit: going back is a reset.
		{"64-bit reset", 1 << 40, 12, WidthUnknown, 12, Reset},
		{"hw counter reset", 900, 3, Width64, 3, Reset},
		// IBA error counters saturate; a lower value means someone cleared them.
		{"16-bit error counter cleared", 65535, 2, Width16, 2, Reset},
		{"8-bit link_downed cleared", 9, 0, Width8, 0, Reset},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, change := Delta(tc.prev, tc.cur, tc.w)
			if got != tc.want || change != tc.wantChange {
				t.Errorf("Delta(%d, %d, %d) = %d, %v; want %d, %v", tc.prev, tc.cur, tc.w, got, change, tc.want, tc.wantChange)
			}
		})
	}
}

func TestWidthOfFollowsKernelTable(t *testing.T) {
	t.Parallel()
	// drivers/infiniband/core/sysfs.c PORT_PMA_ATTR(name, counter, width, offset).
	want := map[string]Width{
		SymbolError: 16, LinkErrorRecovery: 8, LinkDowned: 8, RcvErrors: 16,
		XmitData: WidthUnknown, RcvData: WidthUnknown, XmitPackets: WidthUnknown, RcvPackets: WidthUnknown,
	}
	got := map[string]Width{}
	for _, n := range portCounterNames {
		got[n] = widthOf(n, false)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("widths (-want +got):\n%s", diff)
	}
}

// buildFixture writes a fixture host into a temp dir and returns its sysfs root.
func buildFixture(t testing.TB, name string) string {
	t.Helper()
	dir := fixture.BuildTemp(t, name)
	return fixture.SysfsRoot(dir)
}

func portDir(sys, hca string, port int) string {
	return filepath.Join(sys, "class", "infiniband", hca, "ports", strconv.Itoa(port))
}

func writeCounter(t testing.TB, sys, hca string, port int, rel string, v string) {
	t.Helper()
	p := filepath.Join(portDir(sys, hca, port), rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestReadFixture(t *testing.T) {
	t.Parallel()
	sys := buildFixture(t, fixture.NDv5)
	// mlx5_1 loses a file (an older kernel), mlx5_2 holds garbage, mlx5_3 has no counters at all.
	if err := os.Remove(filepath.Join(portDir(sys, "mlx5_1", 1), "counters", LinkDowned)); err != nil {
		t.Fatal(err)
	}
	writeCounter(t, sys, "mlx5_2", 1, "counters/"+SymbolError, "n/a")
	if err := os.RemoveAll(filepath.Join(portDir(sys, "mlx5_3", 1), "counters")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(portDir(sys, "mlx5_3", 1), "hw_counters")); err != nil {
		t.Fatal(err)
	}
	got := Reader{SysfsRoot: sys}.Read([]Target{{"mlx5_0", 1}, {"mlx5_1", 1}, {"mlx5_2", 1}, {"mlx5_3", 1}})
	hw := map[string]uint64{"out_of_buffer": 0, "local_ack_timeout_err": 0, "rnr_nak_retry_err": 0}
	// The fixture's made-up values: base = 1000000*(index+1) + 1000*port.
	full := func(base uint64) map[string]uint64 {
		return map[string]uint64{
			XmitData: base * 4, RcvData: base*4 + 1, XmitPackets: base, RcvPackets: base + 1,
			SymbolError: 0, LinkDowned: 0, LinkErrorRecovery: 0, RcvErrors: 0,
		}
	}
	m1 := full(2001000)
	delete(m1, LinkDowned)
	m2 := full(3001000)
	delete(m2, SymbolError)
	want := []Port{
		{HCA: "mlx5_0", Port: 1, Counters: full(1001000), HW: hw},
		{HCA: "mlx5_1", Port: 1, Counters: m1, HW: hw},
		{HCA: "mlx5_2", Port: 1, Counters: m2, HW: hw, Errors: map[string]string{SymbolError: filepath.Join(portDir(sys, "mlx5_2", 1), "counters", SymbolError) + `: want a decimal counter, got "n/a"`}},
		{HCA: "mlx5_3", Port: 1, Counters: map[string]uint64{}},
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("Read (-want +got):\n%s", diff)
	}
}

func TestReadRefusesHostileFiles(t *testing.T) {
	t.Parallel()
	sys := buildFixture(t, fixture.HB)
	hca := "mlx5_0"
	// A counter file of megabytes (not a sysfs attribute) must not be read whole.
	writeCounter(t, sys, hca, 1, "counters/"+XmitData, string(make([]byte, 1<<20)))
	got := Reader{SysfsRoot: sys}.Read([]Target{{hca, 1}})
	if _, ok := got[0].Errors[XmitData]; !ok {
		t.Errorf("a 1 MiB counter file was accepted: %+v", got[0])
	}
}
