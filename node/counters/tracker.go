package counters

// Tracker turns successive readings into monotonic totals: each counter's
// total starts at its first reading and then only grows by Delta, so a
// 32-bit wrap or a reset never shows as a drop (Prometheus rate() would
// read a drop as a reset and a 32-bit wrap as a huge negative step
// otherwise). Not safe for concurrent use; the Monitor serialises it.
type Tracker struct {
	last   map[Key]Port
	totals map[Key]*PortTotals
}

// PortTotals are one port's monotonic totals and what the last reading
// changed.
type PortTotals struct {
	HCA  string
	Port int
	// Counters and HW are monotonic totals in the file's own units.
	Counters map[string]uint64
	HW       map[string]uint64
	// Step is how much each counter advanced at the last reading (absent on
	// the first), and Resets/Wraps name counters that went back.
	Step   map[string]uint64
	Resets []string
	Wraps  []string
}

// NewTracker returns an empty tracker.
func NewTracker() *Tracker {
	return &Tracker{last: map[Key]Port{}, totals: map[Key]*PortTotals{}}
}

// Observe folds a reading in and returns every port's totals. Ports absent
// from the reading (an HCA gone) are forgotten, so a returning HCA starts
// afresh.
func (t *Tracker) Observe(ports []Port) []PortTotals {
	seen := make(map[Key]bool, len(ports))
	out := make([]PortTotals, 0, len(ports))
	for _, p := range ports {
		k := p.Key()
		seen[k] = true
		tot, ok := t.totals[k]
		prev := t.last[k]
		if !ok {
			tot = &PortTotals{HCA: p.HCA, Port: p.Port, Counters: map[string]uint64{}, HW: map[string]uint64{}}
			t.totals[k] = tot
		}
		tot.Step = map[string]uint64{}
		tot.Resets, tot.Wraps = nil, nil
		fold := func(name string, cur uint64, w Width, prevVals, totals map[string]uint64, prefix string) {
			old, had := prevVals[name]
			if !had {
				if _, known := totals[name]; !known {
					totals[name] = cur
				}
				return
			}
			d, change := Delta(old, cur, w)
			totals[name] += d
			tot.Step[prefix+name] = d
			switch change {
			case Reset:
				tot.Resets = append(tot.Resets, prefix+name)
			case Wrapped:
				tot.Wraps = append(tot.Wraps, prefix+name)
			}
		}
		for _, name := range portCounterNames {
			if v, ok := p.Counters[name]; ok {
				fold(name, v, widthOf(name, false), prev.Counters, tot.Counters, "")
			}
		}
		for name, v := range p.HW {
			fold(name, v, widthOf(name, true), prev.HW, tot.HW, "hw_counters/")
		}
		t.last[k] = p
		out = append(out, copyTotals(*tot))
	}
	for k := range t.totals {
		if !seen[k] {
			delete(t.totals, k)
			delete(t.last, k)
		}
	}
	return out
}

func copyTotals(p PortTotals) PortTotals {
	c := p
	c.Counters = copyMap(p.Counters)
	c.HW = copyMap(p.HW)
	c.Step = copyMap(p.Step)
	return c
}

func copyMap(m map[string]uint64) map[string]uint64 {
	out := make(map[string]uint64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// DataBytes is the port's total data moved both ways, in bytes.
func (p PortTotals) DataBytes() uint64 {
	return (p.Counters[XmitData] + p.Counters[RcvData]) * DataOctetsPerUnit
}
