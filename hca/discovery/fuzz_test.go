package discovery

import (
	"strings"
	"testing"
)

// Fuzz targets: the parsers read whatever a kernel, a driver or a hand-made
// tree puts in sysfs; they must never panic, and what they accept must
// round-trip or stay in range. Each parserFuzz says that of one parser; its
// own target and FuzzSysfsValue both run it, from the same seeds.

// parserFuzz is one parser's seed corpus and the check any input must pass.
type parserFuzz struct {
	seeds []string
	check func(t *testing.T, s string)
}

var (
	numberedStateFuzz = parserFuzz{[]string{"4: ACTIVE\n", "5: LinkUp", "1: DOWN", ":", "9999999999999999999: X"}, checkNumberedState}
	rateFuzz          = parserFuzz{[]string{"400 Gb/sec (4X NDR)\n", "2.5 Gb/sec (1X SDR)", "10 Gb/sec (4X)", "1e308 Gb/sec", "Gb/sec ()"}, checkRate}
	guidFuzz          = parserFuzz{[]string{"0015:5dff:fd33:ff7f", "00:15:5d:ff:fd:33:ff:7f", "0x00155dfffd33ff7f", "::::"}, checkGUID}
	gidFuzz           = parserFuzz{[]string{"fe80:0000:0000:0000:0015:5dff:fd33:ff7f", "::::::::"}, checkGID}
	devNumberFuzz     = parserFuzz{[]string{"231:192\n", "10:58", "0:0", "231:-1", ":"}, checkDevNumber}
	numaNodeFuzz      = parserFuzz{[]string{"-1\n", "0", "7", "-0", "+1"}, checkNUMANode}
	hexIDFuzz         = parserFuzz{[]string{"0x15b3\n", "0x101e", "0x", "0x10000"}, checkHexID}
)

func (p parserFuzz) fuzz(f *testing.F) {
	p.seed(f)
	f.Fuzz(p.check)
}

func (p parserFuzz) seed(f *testing.F) {
	for _, s := range p.seeds {
		f.Add(s)
	}
}

func FuzzParseNumberedState(f *testing.F) { numberedStateFuzz.fuzz(f) }
func FuzzParseRate(f *testing.F)          { rateFuzz.fuzz(f) }
func FuzzParseGUID(f *testing.F)          { guidFuzz.fuzz(f) }
func FuzzParseGID(f *testing.F)           { gidFuzz.fuzz(f) }
func FuzzParseDevNumber(f *testing.F)     { devNumberFuzz.fuzz(f) }
func FuzzParseNUMANode(f *testing.F)      { numaNodeFuzz.fuzz(f) }
func FuzzParseHexID(f *testing.F)         { hexIDFuzz.fuzz(f) }

// FuzzSysfsValue feeds one value to every parser, as if any sysfs file held
// it; make test runs this one (make fuzz/hca/discovery/Fuzz<Parser> runs a
// single parser).
func FuzzSysfsValue(f *testing.F) {
	all := []parserFuzz{numberedStateFuzz, rateFuzz, guidFuzz, gidFuzz, devNumberFuzz, numaNodeFuzz, hexIDFuzz}
	for _, p := range all {
		p.seed(f)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, p := range all {
			p.check(t, s)
		}
	})
}

func checkNumberedState(t *testing.T, s string) {
	n, name, err := ParseNumberedState(s)
	if err != nil {
		return
	}
	if n < 0 || name == "" || strings.ContainsAny(name, "\t\n\r\x1b") || strings.TrimSpace(name) != name || strings.Contains(name, "  ") {
		t.Errorf("ParseNumberedState(%q) accepted %d, %q", s, n, name)
	}
}

func checkRate(t *testing.T, s string) {
	r, err := ParseRate(s)
	if err != nil {
		return
	}
	again, err := ParseRate(r.String())
	if err != nil || again != r {
		t.Errorf("ParseRate(%q) = %+v; String %q re-parses to %+v, %v", s, r, r.String(), again, err)
	}
}

func checkGUID(t *testing.T, s string) {
	v, norm, err := ParseGUID(s)
	if err != nil {
		return
	}
	v2, norm2, err := ParseGUID(norm)
	if err != nil || v2 != v || norm2 != norm {
		t.Errorf("ParseGUID(%q) = %x %q; re-parse %x %q %v", s, v, norm, v2, norm2, err)
	}
}

func checkGID(t *testing.T, s string) {
	if gid, err := ParseGID(s); err == nil {
		_ = PortGUIDFromGID(gid)
	}
}

func checkDevNumber(t *testing.T, s string) {
	ma, mi, err := ParseDevNumber(s)
	if err == nil && (ma < 0 || ma >= 1<<12 || mi < 0 || mi >= 1<<20) {
		t.Errorf("ParseDevNumber(%q) accepted %d:%d", s, ma, mi)
	}
}

func checkNUMANode(t *testing.T, s string) {
	if n, err := ParseNUMANode(s); err == nil && n < -1 {
		t.Errorf("ParseNUMANode(%q) accepted %d", s, n)
	}
}

func checkHexID(t *testing.T, s string) {
	if id, err := ParseHexID(s); err == nil && len(id) != 4 {
		t.Errorf("ParseHexID(%q) = %q, want 4 hex digits", s, id)
	}
}
