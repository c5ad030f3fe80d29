package counters

import (
	"fmt"
	"strings"
	"time"

	"github.com/ibkube/ibkube/contract"
)

// IdleRule says when a container that holds RDMA devices looks like it is
// not using them.
type IdleRule struct {
	// Window: the container must have been seen holding its devices for at
	// least this long, and its HCAs must have moved fewer than MinBytes
	// during the last Window.
	Window time.Duration
	// MinBytes is the traffic below which HCAs count as idle. Subnet
	// management and a few queue-pair handshakes move kilobytes; a NCCL job
	// on RDMA moves gigabytes per minute.
	MinBytes uint64
}

// Validate says what is wrong with the rule.
func (r IdleRule) Validate() error {
	if r.Window <= 0 {
		return fmt.Errorf("idle window %s: want a positive duration such as 10m", r.Window)
	}
	return nil
}

// Sample is the total data bytes of one HCA (all its ports, both ways) at
// one time.
type Sample struct {
	At    time.Time
	Bytes uint64
}

// History is the recent samples of every HCA, oldest first.
type History map[string][]Sample

// Add appends a sample for each HCA and drops samples older than keep
// before now, keeping the newest one older than that so a full window can
// still be measured.
func (h History) Add(now time.Time, bytes map[string]uint64, keep time.Duration) {
	for hca, b := range bytes {
		s := append(h[hca], Sample{At: now, Bytes: b})
		cut := 0
		for cut+1 < len(s) && !s[cut+1].At.After(now.Add(-keep)) {
			cut++
		}
		h[hca] = s[cut:]
	}
	for hca := range h {
		if _, ok := bytes[hca]; !ok {
			delete(h, hca)
		}
	}
}

// moved is how many bytes the HCA moved since start (from the newest
// sample at or before start); ok is false when the history does not reach
// back that far.
func (h History) moved(hca string, start time.Time) (uint64, bool) {
	s := h[hca]
	if len(s) == 0 {
		return 0, false
	}
	base := -1
	for i, x := range s {
		if x.At.After(start) {
			break
		}
		base = i
	}
	if base < 0 {
		return 0, false
	}
	last := s[len(s)-1].Bytes
	if last < s[base].Bytes {
		return 0, true // totals are monotonic; a shorter series means the HCA came back
	}
	return last - s[base].Bytes, true
}

// IdleVerdict is the rule's answer for one holder.
type IdleVerdict struct {
	Holder Holder
	Idle   bool
	// Moved is the bytes its HCAs moved in the window (0 when Idle is false
	// for lack of history).
	Moved uint64
	// Why is a sentence for logs and the Event.
	Why string
}

// Judge applies the rule to each holder. heldSince is when the agent first
// saw the holder with its devices (the PodResources API has no start time;
// an agent restart restarts the clock, which only delays a warning).
// Holders in optedOut are never idle.
func (r IdleRule) Judge(now time.Time, holders []Holder, heldSince map[string]time.Time, h History, optedOut map[string]bool) []IdleVerdict {
	out := make([]IdleVerdict, 0, len(holders))
	start := now.Add(-r.Window)
	for _, hd := range holders {
		v := IdleVerdict{Holder: hd}
		since, ok := heldSince[hd.ID()]
		switch {
		case optedOut[hd.ID()]:
			v.Why = "opted out"
		case !ok || since.After(start):
			v.Why = "held for less than the window"
		default:
			var total uint64
			covered := true
			for _, hca := range hd.HCAs() {
				m, ok := h.moved(hca, start)
				if !ok {
					covered = false
					break
				}
				total += m
			}
			switch {
			case !covered:
				v.Why = "no counters covering the window"
			case total >= r.MinBytes:
				v.Moved = total
				v.Why = "active"
			default:
				v.Idle, v.Moved = true, total
				v.Why = idleMessage(hd, total, r.Window)
			}
		}
		out = append(out, v)
	}
	return out
}

func idleMessage(h Holder, moved uint64, window time.Duration) string {
	kind := "its HCAs"
	if len(h.Exclusive) == 0 {
		kind = "the shared HCAs it can use"
	}
	return fmt.Sprintf("container %s holds RDMA devices (%s) but %s moved %d bytes in the last %s: "+
		"its collective traffic is probably going over TCP. Check the job's log with NCCL_DEBUG=INFO: "+
		"\"NET/Socket\" instead of \"NET/IB\" means NCCL fell back to sockets (missing /dev/infiniband devices, "+
		"NCCL_IB_HCA naming no HCA, NCCL_NET or NCCL_IB_DISABLE set). Opt out with the pod annotation %s=\"false\".",
		h.Container, strings.Join(h.HCAs(), ","), kind, moved, window, contract.AnnotationIdleWarning)
}
