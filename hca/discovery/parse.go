package discovery

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// The kernel's formats are in drivers/infiniband/core/sysfs.c and
// Documentation/ABI/stable/sysfs-class-infiniband. Every parser takes the raw
// file content (trailing newline and all) and never panics.

// ParseNumberedState splits a port state or physical state as sysfs prints
// it, "4: ACTIVE" or "5: LinkUp", into its number and name. A name may hold
// single inner spaces: the kernel's phys_state names include "Phy Test"
// (drivers/infiniband/core/sysfs.c phys_state_to_str).
func ParseNumberedState(s string) (int, string, error) {
	s = strings.TrimSpace(s)
	num, name, ok := strings.Cut(s, ":")
	if !ok {
		return 0, "", fmt.Errorf("state %q: want \"<number>: <name>\"", s)
	}
	n, err := strconv.Atoi(strings.TrimSpace(num))
	if err != nil || n < 0 {
		return 0, "", fmt.Errorf("state %q: bad number %q", s, num)
	}
	name = strings.TrimSpace(name)
	if name == "" || strings.ContainsAny(name, "\t\n\r") || strings.Contains(name, "  ") || !printableASCII(name) {
		return 0, "", fmt.Errorf("state %q: bad name %q", s, name)
	}
	return n, name, nil
}

// Rate is a port's rate as sysfs prints it: "400 Gb/sec (4X NDR)".
type Rate struct {
	Gbps  float64 // 400, 2.5, 53.125
	Width string  // "4X"; empty when the kernel prints no detail
	Speed string  // "NDR", "HDR", "EDR"; empty when unknown
}

// ParseRate parses ports/<n>/rate: "<number> Gb/sec" optionally followed by
// " (<width> <speed>)", e.g. "400 Gb/sec (4X NDR)", "2.5 Gb/sec (1X SDR)",
// "10 Gb/sec (4X)" (older kernels).
func ParseRate(s string) (Rate, error) {
	s = strings.TrimSpace(s)
	num, rest, ok := strings.Cut(s, " Gb/sec")
	if !ok {
		return Rate{}, fmt.Errorf("rate %q: want \"<n> Gb/sec (<width> <speed>)\"", s)
	}
	g, err := strconv.ParseFloat(num, 64)
	if err != nil || g < 0 || g != g || g > 1e9 {
		return Rate{}, fmt.Errorf("rate %q: bad number %q", s, num)
	}
	r := Rate{Gbps: g}
	rest = strings.TrimSpace(rest)
	if rest == "" {
		return r, nil
	}
	inner, ok := strings.CutPrefix(rest, "(")
	if ok {
		inner, ok = strings.CutSuffix(inner, ")")
	}
	if !ok {
		return Rate{}, fmt.Errorf("rate %q: bad detail %q", s, rest)
	}
	fields := strings.Fields(inner)
	switch len(fields) {
	case 1:
		r.Width = fields[0]
	case 2:
		r.Width, r.Speed = fields[0], fields[1]
	default:
		return Rate{}, fmt.Errorf("rate %q: bad detail %q", s, rest)
	}
	return r, nil
}

// String prints the rate as the kernel does.
func (r Rate) String() string {
	s := strconv.FormatFloat(r.Gbps, 'f', -1, 64) + " Gb/sec"
	switch {
	case r.Width != "" && r.Speed != "":
		s += " (" + r.Width + " " + r.Speed + ")"
	case r.Width != "":
		s += " (" + r.Width + ")"
	}
	return s
}

// ParseGUID reads a 64-bit GUID in any of the forms it appears in:
// sysfs node_guid "0015:5dff:fd33:ff7f", colon bytes "00:15:5d:ff:fd:33:ff:7f",
// or hex "0x00155dfffd33ff7f". It returns the value and the sysfs spelling.
func ParseGUID(s string) (uint64, string, error) {
	s = strings.TrimSpace(s)
	h := strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	switch {
	case len(h) == 19 && h[4] == ':' && h[9] == ':' && h[14] == ':':
		h = h[0:4] + h[5:9] + h[10:14] + h[15:19]
	case len(h) == 23 && strings.Count(h, ":") == 7:
		var b strings.Builder
		for i, part := range strings.Split(h, ":") {
			if len(part) != 2 {
				return 0, "", fmt.Errorf("GUID %q: byte %d is %q", s, i, part)
			}
			b.WriteString(part)
		}
		h = b.String()
	case len(h) == 16:
	default:
		return 0, "", fmt.Errorf("GUID %q: want xxxx:xxxx:xxxx:xxxx", s)
	}
	v, err := strconv.ParseUint(h, 16, 64)
	if err != nil {
		return 0, "", fmt.Errorf("GUID %q: %w", s, err)
	}
	return v, FormatGUID(v), nil
}

// FormatGUID prints a GUID the way sysfs does: "0015:5dff:fd33:ff7f".
func FormatGUID(v uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", v>>48, (v>>32)&0xffff, (v>>16)&0xffff, v&0xffff)
}

// ParseGID parses ports/<n>/gids/<i>: eight colon-separated groups of four
// hex digits, "fe80:0000:0000:0000:0015:5dff:fd33:ff7f".
func ParseGID(s string) ([16]byte, error) {
	var gid [16]byte
	s = strings.TrimSpace(s)
	parts := strings.Split(s, ":")
	if len(parts) != 8 {
		return gid, fmt.Errorf("GID %q: want 8 groups of 4 hex digits", s)
	}
	for i, p := range parts {
		if len(p) != 4 {
			return gid, fmt.Errorf("GID %q: group %d is %q", s, i, p)
		}
		if _, err := hex.Decode(gid[2*i:2*i+2], []byte(p)); err != nil {
			return gid, fmt.Errorf("GID %q: %w", s, err)
		}
	}
	return gid, nil
}

// PortGUIDFromGID returns the interface identifier (the last 8 bytes) of a
// GID in sysfs GUID spelling; for GID 0 of an InfiniBand port it is the port
// GUID.
func PortGUIDFromGID(gid [16]byte) string {
	var v uint64
	for _, b := range gid[8:] {
		v = v<<8 | uint64(b)
	}
	return FormatGUID(v)
}

// ParseNUMANode parses /sys/bus/pci/devices/<bdf>/numa_node; -1 (the kernel
// does not know) is valid and stays -1, any other negative is an error.
func ParseNUMANode(s string) (int, error) {
	s = strings.TrimSpace(s)
	n, err := strconv.Atoi(s)
	if err != nil || n < -1 || n > 1<<16 {
		return 0, fmt.Errorf("numa_node %q: want -1 or a node number", s)
	}
	return n, nil
}

// ParseDevNumber parses a char device's sysfs dev file, "231:192", into its
// major and minor numbers.
func ParseDevNumber(s string) (major, minor int, err error) {
	s = strings.TrimSpace(s)
	ma, mi, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, fmt.Errorf("dev %q: want \"<major>:<minor>\"", s)
	}
	maj, err1 := strconv.ParseUint(ma, 10, 12) // MAJOR is 12 bits (include/linux/kdev_t.h)
	min, err2 := strconv.ParseUint(mi, 10, 20) // MINOR is 20 bits
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("dev %q: want \"<major>:<minor>\" in range", s)
	}
	return int(maj), int(min), nil
}

// ParseHexID parses a PCI vendor or device file, "0x15b3", into the
// 4-digit lower-case form used in the inventory ("15b3").
func ParseHexID(s string) (string, error) {
	s = strings.TrimSpace(s)
	h := strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	v, err := strconv.ParseUint(h, 16, 16)
	if err != nil || h == "" {
		return "", fmt.Errorf("PCI ID %q: want 0x followed by up to 4 hex digits", s)
	}
	return fmt.Sprintf("%04x", v), nil
}

func printableASCII(s string) bool {
	for _, c := range []byte(s) {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}
