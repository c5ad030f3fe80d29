package discovery

import (
	"strings"
	"testing"
)

// Fuzz targets: the parsers read whatever a kernel, a driver or a hand-made
// tree puts in sysfs; they must never panic, and what they accept must
// round-trip.

func FuzzParseNumberedState(f *testing.F) {
	addSeeds(f, "4: ACTIVE\n", "5: LinkUp", "1: DOWN", ":", "9999999999999999999: X")
	f.Fuzz(func(t *testing.T, s string) {
		n, name, err := ParseNumberedState(s)
		if err != nil {
			return
		}
		if n < 0 || name == "" || strings.ContainsAny(name, "\t\n\r\x1b") || strings.TrimSpace(name) != name || strings.Contains(name, "  ") {
			t.Errorf("ParseNumberedState(%q) accepted %d, %q", s, n, name)
		}
	})
}

func FuzzParseRate(f *testing.F) {
	addSeeds(f, "400 Gb/sec (4X NDR)\n", "2.5 Gb/sec (1X SDR)", "10 Gb/sec (4X)", "1e308 Gb/sec", "Gb/sec ()")
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRate(s)
		if err != nil {
			return
		}
		again, err := ParseRate(r.String())
		if err != nil || again != r {
			t.Errorf("ParseRate(%q) = %+v; String %q re-parses to %+v, %v", s, r, r.String(), again, err)
		}
	})
}

func FuzzParseGUID(f *testing.F) {
	addSeeds(f, "0015:5dff:fd33:ff7f", "00:15:5d:ff:fd:33:ff:7f", "0x00155dfffd33ff7f", "::::")
	f.Fuzz(func(t *testing.T, s string) {
		v, norm, err := ParseGUID(s)
		if err != nil {
			return
		}
		v2, norm2, err := ParseGUID(norm)
		if err != nil || v2 != v || norm2 != norm {
			t.Errorf("ParseGUID(%q) = %x %q; re-parse %x %q %v", s, v, norm, v2, norm2, err)
		}
	})
}

func FuzzParseGID(f *testing.F) {
	f.Add("fe80:0000:0000:0000:0015:5dff:fd33:ff7f")
	f.Add("::::::::")
	f.Fuzz(func(t *testing.T, s string) {
		gid, err := ParseGID(s)
		if err != nil {
			return
		}
		_ = PortGUIDFromGID(gid)
	})
}

func FuzzParseDevNumber(f *testing.F) {
	addSeeds(f, "231:192\n", "10:58", "0:0", "231:-1", ":")
	f.Fuzz(func(t *testing.T, s string) {
		ma, mi, err := ParseDevNumber(s)
		if err != nil {
			return
		}
		if ma < 0 || ma >= 1<<12 || mi < 0 || mi >= 1<<20 {
			t.Errorf("ParseDevNumber(%q) accepted %d:%d", s, ma, mi)
		}
	})
}

func FuzzParseNUMANode(f *testing.F) {
	addSeeds(f, "-1\n", "0", "7", "-0", "+1")
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseNUMANode(s)
		if err == nil && n < -1 {
			t.Errorf("ParseNUMANode(%q) accepted %d", s, n)
		}
	})
}

func FuzzParseHexID(f *testing.F) {
	addSeeds(f, "0x15b3\n", "0x101e", "0x", "0x10000")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseHexID(s)
		if err == nil && len(id) != 4 {
			t.Errorf("ParseHexID(%q) = %q, want 4 hex digits", s, id)
		}
	})
}

// FuzzSysfsValue feeds one value to every parser, as if any sysfs file held
// it; make test runs this one (make fuzz-discovery-<Name> runs a single parser).
func FuzzSysfsValue(f *testing.F) {
	addSeeds(f, "4: ACTIVE\n", "400 Gb/sec (4X NDR)\n", "0015:5dff:fd33:ff7f", "fe80:0000:0000:0000:0015:5dff:fd33:ff7f", "231:192", "-1", "0x15b3")
	f.Fuzz(func(t *testing.T, s string) {
		_, _, _ = ParseNumberedState(s)
		if r, err := ParseRate(s); err == nil {
			if again, err := ParseRate(r.String()); err != nil || again != r {
				t.Errorf("rate %q does not round-trip: %+v vs %+v (%v)", s, r, again, err)
			}
		}
		if v, norm, err := ParseGUID(s); err == nil {
			if v2, _, err := ParseGUID(norm); err != nil || v2 != v {
				t.Errorf("GUID %q does not round-trip", s)
			}
		}
		if gid, err := ParseGID(s); err == nil {
			_ = PortGUIDFromGID(gid)
		}
		if ma, mi, err := ParseDevNumber(s); err == nil && (ma < 0 || mi < 0) {
			t.Errorf("dev %q accepted as %d:%d", s, ma, mi)
		}
		if n, err := ParseNUMANode(s); err == nil && n < -1 {
			t.Errorf("numa_node %q accepted as %d", s, n)
		}
		if id, err := ParseHexID(s); err == nil && len(id) != 4 {
			t.Errorf("PCI ID %q accepted as %q", s, id)
		}
	})
}

// addSeeds adds each string to f's seed corpus.
func addSeeds(f *testing.F, seeds ...string) {
	for _, s := range seeds {
		f.Add(s)
	}
}
