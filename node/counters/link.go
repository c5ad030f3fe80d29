package counters

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Node Event reasons.
const (
	ReasonLinkErrors  = "RDMALinkErrors"
	ReasonLinkFlapped = "RDMALinkFlapped"
	ReasonIdle        = "RDMAIdle"
)

// LinkFinding is a port whose error counters rose at the last reading.
type LinkFinding struct {
	HCA  string
	Port int
	// Reason is ReasonLinkFlapped when link_downed rose, else ReasonLinkErrors.
	Reason string
	// Rose maps each error counter that rose to how much.
	Rose    map[string]uint64
	Message string
}

// LinkFindings lists the ports whose error counters rose at the last
// reading. A reset is not a rise: the counter's new value is kept as the
// step by Delta, but someone clearing counters is not a sick link, so reset
// counters are skipped.
func LinkFindings(ports []PortTotals) []LinkFinding {
	var out []LinkFinding
	for _, p := range ports {
		reset := map[string]bool{}
		for _, r := range p.Resets {
			reset[r] = true
		}
		rose := map[string]uint64{}
		for _, name := range ErrorCounterNames() {
			if d := p.Step[name]; d > 0 && !reset[name] {
				rose[name] = d
			}
		}
		if len(rose) == 0 {
			continue
		}
		f := LinkFinding{HCA: p.HCA, Port: p.Port, Reason: ReasonLinkErrors, Rose: rose}
		if rose[LinkDowned] > 0 {
			f.Reason = ReasonLinkFlapped
		}
		parts := make([]string, 0, len(rose))
		for _, n := range slices.Sorted(maps.Keys(rose)) {
			parts = append(parts, fmt.Sprintf("%s +%d (total %d)", n, rose[n], p.Counters[n]))
		}
		f.Message = fmt.Sprintf("%s port %d: %s. Check the cable and the switch port (ibstat, "+
			"perfquery -x; link_downed counts the link going down, symbol_error and link_error_recovery "+
			"point at a marginal cable or transceiver).", p.HCA, p.Port, strings.Join(parts, ", "))
		out = append(out, f)
	}
	return out
}
