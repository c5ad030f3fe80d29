package discovery

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseNumberedState(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		num     int
		name    string
		wantErr bool
	}{
		{"4: ACTIVE\n", 4, "ACTIVE", false},
		{"1: DOWN", 1, "DOWN", false},
		{"5: LinkUp\n", 5, "LinkUp", false},
		{"2: Polling", 2, "Polling", false},
		{"0: NOP", 0, "NOP", false},
		{"7: Phy Test\n", 7, "Phy Test", false},
		{"0: <unknown>", 0, "<unknown>", false},
		{"1: DOWN\x1b[2J", 0, "", true},
		{"1: DO  WN", 0, "", true},
		{"ACTIVE", 0, "", true},
		{"x: ACTIVE", 0, "", true},
		{"4:", 0, "", true},
		{"-1: DOWN", 0, "", true},
		{"4: ACTIVE NOW", 4, "ACTIVE NOW", false}, // as "7: Phy Test": names may hold a space
	}
	for _, tc := range tests {
		num, name, err := ParseNumberedState(tc.in)
		if (err != nil) != tc.wantErr || num != tc.num || name != tc.name {
			t.Errorf("ParseNumberedState(%q) = %d, %q, %v", tc.in, num, name, err)
		}
	}
}

func TestParseRate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    Rate
		wantErr bool
	}{
		{"400 Gb/sec (4X NDR)\n", Rate{400, "4X", "NDR"}, false},
		{"200 Gb/sec (4X HDR)", Rate{200, "4X", "HDR"}, false},
		{"2.5 Gb/sec (1X SDR)", Rate{2.5, "1X", "SDR"}, false},
		{"53.125 Gb/sec (1X HDR)", Rate{53.125, "1X", "HDR"}, false},
		{"10 Gb/sec (4X)", Rate{10, "4X", ""}, false},
		{"100 Gb/sec", Rate{100, "", ""}, false},
		{"fast", Rate{}, true},
		{"NaN Gb/sec", Rate{}, true},
		{"400 Gb/sec 4X NDR", Rate{}, true},
		{"400 Gb/sec (4X NDR extra)", Rate{}, true},
	}
	for _, tc := range tests {
		got, err := ParseRate(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseRate(%q) = %+v, %v", tc.in, got, err)
		}
		if err == nil && got.String() != strings.TrimSpace(tc.in) {
			t.Errorf("Rate.String() = %q, want %q", got.String(), strings.TrimSpace(tc.in))
		}
	}
}

func TestParseGUID(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"0015:5dff:fd33:ff7f\n", "00:15:5d:ff:fd:33:ff:7f", "0x00155dfffd33ff7f", "00155DFFFD33FF7F"} {
		v, s, err := ParseGUID(in)
		if err != nil || v != 0x00155dfffd33ff7f || s != "0015:5dff:fd33:ff7f" {
			t.Errorf("ParseGUID(%q) = %x, %q, %v", in, v, s, err)
		}
	}
	for _, in := range []string{"", "0015:5dff:fd33", "zz15:5dff:fd33:ff7f", "0:15:5d:ff:fd:33:ff:7f0"} {
		if _, _, err := ParseGUID(in); err == nil {
			t.Errorf("ParseGUID(%q): no error", in)
		}
	}
	if got, err := netlinkGUID("7f:ff:33:fd:ff:5d:15:00"); err != nil || got != "0015:5dff:fd33:ff7f" {
		t.Errorf("netlinkGUID = %q, %v", got, err)
	}
}

func TestParseGID(t *testing.T) {
	t.Parallel()
	gid, err := ParseGID("fe80:0000:0000:0000:0015:5dff:fd33:ff7f\n")
	if err != nil {
		t.Fatal(err)
	}
	want := [16]byte{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x15, 0x5d, 0xff, 0xfd, 0x33, 0xff, 0x7f}
	if diff := cmp.Diff(want, gid); diff != "" {
		t.Error(diff)
	}
	if got := PortGUIDFromGID(gid); got != "0015:5dff:fd33:ff7f" {
		t.Errorf("PortGUIDFromGID = %q", got)
	}
	for _, in := range []string{"fe80::1", "fe80:0000:0000:0000:0015:5dff:fd33", "fe80:0000:0000:0000:0015:5dff:fd33:ff7g"} {
		if _, err := ParseGID(in); err == nil {
			t.Errorf("ParseGID(%q): no error", in)
		}
	}
}

func TestParseNUMANode(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int{"-1\n": -1, "0": 0, "3\n": 3} {
		if got, err := ParseNUMANode(in); err != nil || got != want {
			t.Errorf("ParseNUMANode(%q) = %d, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "-2", "one", "99999999999"} {
		if _, err := ParseNUMANode(in); err == nil {
			t.Errorf("ParseNUMANode(%q): no error", in)
		}
	}
}

func TestParseDevNumber(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][2]int{"231:192\n": {231, 192}, "231:0": {231, 0}, "10:58": {10, 58}} {
		ma, mi, err := ParseDevNumber(in)
		if err != nil || ma != want[0] || mi != want[1] {
			t.Errorf("ParseDevNumber(%q) = %d, %d, %v", in, ma, mi, err)
		}
	}
	for _, in := range []string{"231", "231:", ":192", "-1:2", "5000:1", "231:1048576"} {
		if _, _, err := ParseDevNumber(in); err == nil {
			t.Errorf("ParseDevNumber(%q): no error", in)
		}
	}
}

func TestParseHexID(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"0x15b3\n": "15b3", "0x101E": "101e", "0x0007": "0007", "1021": "1021"} {
		if got, err := ParseHexID(in); err != nil || got != want {
			t.Errorf("ParseHexID(%q) = %q, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "0x", "0x10000", "0xzz"} {
		if _, err := ParseHexID(in); err == nil {
			t.Errorf("ParseHexID(%q): no error", in)
		}
	}
}
