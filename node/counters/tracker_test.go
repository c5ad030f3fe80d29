package counters

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestTrackerTotals(t *testing.T) {
	t.Parallel()
	read := func(xmit, rcv, linkDowned, hw uint64) []Port {
		return []Port{{HCA: "mlx5_0", Port: 1,
			Counters: map[string]uint64{XmitData: xmit, RcvData: rcv, LinkDowned: linkDowned},
			HW:       map[string]uint64{"out_of_buffer": hw}}}
	}
	type want struct {
		counters map[string]uint64
		hw       map[string]uint64
		step     map[string]uint64
		resets   []string
		wraps    []string
	}
	steps := []struct {
		name string
		in   []Port
		want want
	}{
		{"first reading is the start", read(math.MaxUint32-9, 1<<40, 1, 5), want{
			counters: map[string]uint64{XmitData: math.MaxUint32 - 9, RcvData: 1 << 40, LinkDowned: 1},
			hw:       map[string]uint64{"out_of_buffer": 5}, step: map[string]uint64{}}},
		{"32-bit xmit wraps, 64-bit rcv rises", read(20, 1<<40+8, 1, 5), want{
			counters: map[string]uint64{XmitData: math.MaxUint32 + 21, RcvData: 1<<40 + 8, LinkDowned: 1},
			hw:       map[string]uint64{"out_of_buffer": 5},
			step:     map[string]uint64{XmitData: 30, RcvData: 8, LinkDowned: 0, "hw_counters/out_of_buffer": 0},
			wraps:    []string{XmitData}}},
		{"driver reload resets everything", read(100, 50, 0, 2), want{
			counters: map[string]uint64{XmitData: math.MaxUint32 + 101, RcvData: 1<<40 + 58, LinkDowned: 1},
			hw:       map[string]uint64{"out_of_buffer": 7},
			step:     map[string]uint64{XmitData: 80, RcvData: 50, LinkDowned: 0, "hw_counters/out_of_buffer": 2},
			// rcv went from above 2^32 to 50: reset. xmit went from 20 to 100: a
			// reset that lands above the last value cannot be seen, it reads as a rise.
			resets: []string{RcvData, LinkDowned, "hw_counters/out_of_buffer"}}},
	}
	tr := NewTracker()
	for _, s := range steps {
		got := tr.Observe(s.in)
		if len(got) != 1 {
			t.Fatalf("%s: %d ports, want 1", s.name, len(got))
		}
		g := want{counters: got[0].Counters, hw: got[0].HW, step: got[0].Step, resets: got[0].Resets, wraps: got[0].Wraps}
		if diff := cmp.Diff(s.want, g, cmp.AllowUnexported(want{}), cmpopts.EquateEmpty(), cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
			t.Errorf("%s (-want +got):\n%s", s.name, diff)
		}
	}
	if got := tr.Observe(nil); len(got) != 0 {
		t.Errorf("a vanished port is still reported: %+v", got)
	}
	if got := tr.Observe(read(3, 4, 0, 0)); got[0].Counters[XmitData] != 3 {
		t.Errorf("a returning port must start afresh at its reading, got total %d", got[0].Counters[XmitData])
	}
}

func TestLinkFindings(t *testing.T) {
	t.Parallel()
	in := []PortTotals{
		{HCA: "mlx5_0", Port: 1, Counters: map[string]uint64{SymbolError: 12, LinkDowned: 3}, Step: map[string]uint64{SymbolError: 2, LinkDowned: 1}},
		{HCA: "mlx5_1", Port: 1, Counters: map[string]uint64{RcvErrors: 40}, Step: map[string]uint64{RcvErrors: 40}},
		{HCA: "mlx5_2", Port: 1, Counters: map[string]uint64{RcvErrors: 40}, Step: map[string]uint64{RcvErrors: 4}, Resets: []string{RcvErrors}},
		{HCA: "mlx5_3", Port: 1, Counters: map[string]uint64{XmitData: 9}, Step: map[string]uint64{XmitData: 9}},
	}
	got := LinkFindings(in)
	want := []LinkFinding{
		{HCA: "mlx5_0", Port: 1, Reason: ReasonLinkFlapped, Rose: map[string]uint64{SymbolError: 2, LinkDowned: 1}},
		{HCA: "mlx5_1", Port: 1, Reason: ReasonLinkErrors, Rose: map[string]uint64{RcvErrors: 40}},
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(LinkFinding{}, "Message")); diff != "" {
		t.Errorf("LinkFindings (-want +got):\n%s", diff)
	}
	if len(got) > 0 && got[0].Message != "mlx5_0 port 1: link_downed +1 (total 3), symbol_error +2 (total 12). Check the cable and the switch port (ibstat, perfquery -x; link_downed counts the link going down, symbol_error and link_error_recovery point at a marginal cable or transceiver)." {
		t.Errorf("message: %s", got[0].Message)
	}
}
