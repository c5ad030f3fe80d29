package discovery

import (
	"strings"
	"testing"
)

// checkParse runs parse on every input of good, expecting its value, and
// on every input of bad, expecting an error.
func checkParse[T comparable](t *testing.T, name string, parse func(string) (T, error), good map[string]T, bad []string) {
	t.Helper()
	for in, want := range good {
		if got, err := parse(in); err != nil || got != want {
			t.Errorf("%s(%q) = %+v, %v; want %+v", name, in, got, err, want)
		}
	}
	for _, in := range bad {
		if got, err := parse(in); err == nil {
			t.Errorf("%s(%q) = %+v, want an error", name, in, got)
		}
	}
}

// two is what a parser returning two values gave.
type two[A, B comparable] struct {
	a A
	b B
}

// both makes a parser of two values one of checkParse's.
func both[A, B comparable](parse func(string) (A, B, error)) func(string) (two[A, B], error) {
	return func(s string) (two[A, B], error) {
		a, b, err := parse(s)
		return two[A, B]{a, b}, err
	}
}

func TestParseNumberedState(t *testing.T) {
	t.Parallel()
	checkParse(t, "ParseNumberedState", both(ParseNumberedState), map[string]two[int, string]{
		"4: ACTIVE\n":   {4, "ACTIVE"},
		"1: DOWN":       {1, "DOWN"},
		"5: LinkUp\n":   {5, "LinkUp"},
		"2: Polling":    {2, "Polling"},
		"0: NOP":        {0, "NOP"},
		"7: Phy Test\n": {7, "Phy Test"},
		"0: <unknown>":  {0, "<unknown>"},
		"4: ACTIVE NOW": {4, "ACTIVE NOW"}, // as "7: Phy Test": names may hold a space
	}, []string{"1: DOWN\x1b[2J", "1: DO  WN", "ACTIVE", "x: ACTIVE", "4:", "-1: DOWN"})
}

func TestParseRate(t *testing.T) {
	t.Parallel()
	good := map[string]Rate{
		"400 Gb/sec (4X NDR)\n":  {400, "4X", "NDR"},
		"200 Gb/sec (4X HDR)":    {200, "4X", "HDR"},
		"2.5 Gb/sec (1X SDR)":    {2.5, "1X", "SDR"},
		"53.125 Gb/sec (1X HDR)": {53.125, "1X", "HDR"},
		"10 Gb/sec (4X)":         {10, "4X", ""},
		"100 Gb/sec":             {100, "", ""},
	}
	checkParse(t, "ParseRate", ParseRate, good,
		[]string{"fast", "NaN Gb/sec", "400 Gb/sec 4X NDR", "400 Gb/sec (4X NDR extra)"})
	for in, r := range good {
		if r.String() != strings.TrimSpace(in) {
			t.Errorf("Rate.String() = %q, want %q", r.String(), strings.TrimSpace(in))
		}
	}
}

func TestParseGUID(t *testing.T) {
	t.Parallel()
	want := two[uint64, string]{0x00155dfffd33ff7f, "0015:5dff:fd33:ff7f"}
	checkParse(t, "ParseGUID", both(ParseGUID), map[string]two[uint64, string]{
		"0015:5dff:fd33:ff7f\n":   want,
		"00:15:5d:ff:fd:33:ff:7f": want,
		"0x00155dfffd33ff7f":      want,
		"00155DFFFD33FF7F":        want,
	}, []string{"", "0015:5dff:fd33", "zz15:5dff:fd33:ff7f", "0:15:5d:ff:fd:33:ff:7f0"})
	checkParse(t, "netlinkGUID", netlinkGUID, map[string]string{"7f:ff:33:fd:ff:5d:15:00": "0015:5dff:fd33:ff7f"}, nil)
}

func TestParseGID(t *testing.T) {
	t.Parallel()
	gid := [16]byte{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x15, 0x5d, 0xff, 0xfd, 0x33, 0xff, 0x7f}
	checkParse(t, "ParseGID", ParseGID, map[string][16]byte{"fe80:0000:0000:0000:0015:5dff:fd33:ff7f\n": gid},
		[]string{"fe80::1", "fe80:0000:0000:0000:0015:5dff:fd33", "fe80:0000:0000:0000:0015:5dff:fd33:ff7g"})
	if got := PortGUIDFromGID(gid); got != "0015:5dff:fd33:ff7f" {
		t.Errorf("PortGUIDFromGID = %q", got)
	}
}

func TestParseNUMANode(t *testing.T) {
	t.Parallel()
	checkParse(t, "ParseNUMANode", ParseNUMANode, map[string]int{"-1\n": -1, "0": 0, "3\n": 3},
		[]string{"", "-2", "one", "99999999999"})
}

func TestParseDevNumber(t *testing.T) {
	t.Parallel()
	checkParse(t, "ParseDevNumber", both(ParseDevNumber), map[string]two[int, int]{"231:192\n": {231, 192}, "231:0": {231, 0}, "10:58": {10, 58}},
		[]string{"231", "231:", ":192", "-1:2", "5000:1", "231:1048576"})
}

func TestParseHexID(t *testing.T) {
	t.Parallel()
	checkParse(t, "ParseHexID", ParseHexID, map[string]string{"0x15b3\n": "15b3", "0x101E": "101e", "0x0007": "0007", "1021": "1021"},
		[]string{"", "0x", "0x10000", "0xzz"})
}
