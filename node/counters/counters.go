// Package counters reads the InfiniBand/RoCE port counters of a node's HCAs
// from sysfs, turns successive readings into deltas that survive counter
// wraps and resets, attributes them to the containers holding the HCAs, and
// decides which of those containers look like they are not using RDMA.
//
// The files and their units are the kernel's
// (torvalds/linux Documentation/ABI/stable/sysfs-class-infiniband,
// "/sys/class/infiniband/<device>/ports/<port-num>/counters/" and
// ".../hw_counters/"); the widths of the legacy counters are those of
// drivers/infiniband/core/sysfs.c (PORT_PMA_ATTR, the IBA PortCounters
// attribute layout). Reading is I/O at the edge (Reader); everything else is
// pure.
package counters

import "math"

// Counter file names under ports/<n>/counters/ that the agent reads. The
// list is fixed rather than listed from the directory so that a scrape does
// not pay a readdir per port; hw_counters, whose names depend on the driver,
// are listed.
const (
	XmitData          = "port_xmit_data"
	RcvData           = "port_rcv_data"
	XmitPackets       = "port_xmit_packets"
	RcvPackets        = "port_rcv_packets"
	SymbolError       = "symbol_error"
	LinkDowned        = "link_downed"
	LinkErrorRecovery = "link_error_recovery"
	RcvErrors         = "port_rcv_errors"
)

// portCounterNames are the ports/<n>/counters files read, in export order.
var portCounterNames = [...]string{XmitData, RcvData, XmitPackets, RcvPackets, SymbolError, LinkDowned, LinkErrorRecovery, RcvErrors}

// ErrorCounterNames are the counters whose rise means a sick link.
func ErrorCounterNames() []string {
	return []string{SymbolError, LinkDowned, LinkErrorRecovery, RcvErrors}
}

// DataOctetsPerUnit is what one unit of port_xmit_data/port_rcv_data is
// worth: the ABI says "Total number of data octets, divided by 4 (lanes)"
// (Documentation/ABI/stable/sysfs-class-infiniband; mlx5 shifts the octet
// count right by 2 in drivers/infiniband/hw/mlx5/mad.c).
const DataOctetsPerUnit = 4

// Width is how many bits a counter holds, which decides whether a value
// lower than the previous one is a wrap or a reset.
type Width int

const (
	// WidthUnknown: port_xmit_data, port_rcv_data and the packet counters are
	// 64-bit when the device reports PortCountersExtended and 32-bit
	// (PortCounters) otherwise; sysfs does not say which, so Delta decides
	// from the values.
	WidthUnknown Width = 0
	Width8       Width = 8
	Width16      Width = 16
	Width64      Width = 64
)

// widthOf is the width of a counter file. The error counters keep their IBA
// PortCounters width whatever the device (drivers/infiniband/core/sysfs.c:
// PORT_PMA_ATTR(symbol_error, 0, 16, 32), (link_error_recovery, 1, 8, 48),
// (link_downed, 2, 8, 56), (port_rcv_errors, 3, 16, 64)); hw_counters are
// u64 (include/rdma/ib_verbs.h struct rdma_hw_stats, value[]).
func widthOf(name string, hw bool) Width {
	if hw {
		return Width64
	}
	switch name {
	case SymbolError, RcvErrors:
		return Width16
	case LinkDowned, LinkErrorRecovery:
		return Width8
	}
	return WidthUnknown
}

// Change is how a counter moved between two readings.
type Change int

const (
	// Rose: the counter moved forward (or stayed).
	Rose Change = iota
	// Wrapped: a 32-bit legacy counter passed 2^32 and restarted at zero.
	Wrapped
	// Reset: the counter went back (driver reload, a perfquery -R, a
	// 64-bit counter can't wrap in a node's life); the delta counts from zero.
	Reset
)

// Delta is how much a counter advanced from prev to cur.
//
//   - cur >= prev: cur - prev.
//   - WidthUnknown (the data and packet counters) and prev fits in 32 bits:
//     a 32-bit legacy counter that wrapped at 2^32, delta 2^32 - prev + cur.
//     A 64-bit counter reset while still below 2^32 is miscounted as a wrap
//     (once, by less than 2^32 units); nothing in sysfs tells the two apart.
//   - Otherwise (a 64-bit counter, or one that was already above 2^32, or an
//     8/16-bit error counter, which IBA counters saturate rather than wrap):
//     a reset, delta cur.
func Delta(prev, cur uint64, w Width) (uint64, Change) {
	switch {
	case cur >= prev:
		return cur - prev, Rose
	case w == WidthUnknown && prev <= math.MaxUint32:
		return (math.MaxUint32 - prev) + cur + 1, Wrapped
	default:
		return cur, Reset
	}
}
