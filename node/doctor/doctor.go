// Package doctor checks a node for the RDMA problems users hit most (no
// devices, ports down, IPoIB down, no GPUDirect RDMA path, no NRI, a low
// runtime memlock, nothing to advertise) and says how to fix each.
//
// Check is pure: it turns Facts into a Report. Gather (gather.go) reads the
// facts from a node or from fake roots.
package doctor

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/node/counters"
	"github.com/ibkube/ibkube/node/memlock"
)

// Status of one check.
type Status string

// Statuses, from good to bad.
const (
	Pass Status = "PASS"
	Warn Status = "WARN"
	Fail Status = "FAIL"
	// Skip: the check does not apply to this node.
	Skip Status = "SKIP"
)

// Result is one check's verdict.
type Result struct {
	Name    string `json:"name"`
	Status  Status `json:"status"`
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"`
}

// Report is every check, in a fixed order.
type Report struct {
	Results []Result `json:"checks"`
	// Failed is true when any check failed (the CLI then exits non-zero).
	Failed bool `json:"failed"`
}

// Facts are what Gather read from the node.
type Facts struct {
	// Node is the inventory discovery reported; ScanError is set when the
	// scan itself failed.
	Node      inventory.Node
	ScanError string
	// Netdevs maps interface names to their operstate ("up", "down", ...).
	Netdevs map[string]string
	// GPUDirect is what the node shows of the GPUDirect RDMA paths.
	GPUDirect GPUDirectFacts
	NRI       NRIFacts
	// Runtime is the container runtime's memlock, nil when unknown;
	// RuntimeError says why.
	Runtime      *memlock.RuntimeLimit
	RuntimeError string
	// MemlockMax is the agent's --memlock-max, nil when not set.
	MemlockMax *uint64
	// Advertised is what the agent would advertise, per pool.
	Advertised []Advertised
	// Counters are the ports' counters at one reading.
	Counters []counters.Port
	// KubeletPlugins is what the kubelet's device plugin directory shows.
	KubeletPlugins KubeletPluginFacts
	// Holders are the containers holding the agent's HCAs, from the
	// kubelet's PodResources API and the agent's record of shared slots;
	// HoldersChecked is false when no socket was given, HoldersError says
	// why they could not be listed.
	Holders        []counters.Holder
	HoldersChecked bool
	HoldersError   string
	// Holds are what the DRA driver's CDI specs record.
	Holds HoldsFacts
}

// NRIFacts describe the runtime's NRI socket.
type NRIFacts struct {
	Enabled   bool
	Socket    string
	Reachable bool
	Error     string
}

// Advertised is one resource the agent would advertise.
type Advertised struct {
	Resource string   `json:"resource"`
	Mode     string   `json:"mode"`
	Devices  int      `json:"devices"`
	Healthy  int      `json:"healthy"`
	HCAs     []string `json:"hcas"`
}

// Check names, in report order.
const (
	CheckDevices   = "rdma-devices"
	CheckPorts     = "ports"
	CheckNetdevs   = "ipoib"
	CheckGPUDirect = "gpudirect"
	CheckNRI       = "nri"
	CheckMemlock   = "runtime-memlock"
	CheckAdvertise = "advertise"
	CheckLinkErrs  = "link-errors"
	CheckExclusive = "exclusive-hcas"
)

// Check turns facts into a report.
func Check(f Facts) Report {
	r := Report{Results: []Result{
		checkDevices(f), checkPorts(f), checkPartition(f), checkNetdevs(f), checkGPUDirect(f),
		checkNRI(f), checkMemlock(f), checkAdvertise(f), checkGID(f), checkOtherPlugins(f), checkLinkErrors(f),
		checkExclusive(f), checkHeldTwice(f),
	}}
	for _, res := range r.Results {
		if res.Status == Fail {
			r.Failed = true
		}
	}
	return r
}

// checkExclusive warns when an HCA one container holds exclusively is
// reachable by others through the shared resource: the kubelet counts the
// two resources apart, and a device plugin cannot refuse an exclusive pod
// admitted after the sharers.
func checkExclusive(f Facts) Result {
	res := Result{Name: CheckExclusive}
	switch {
	case !f.HoldersChecked:
		res.Status, res.Message = Pass, "not checked (no PodResources socket given)"
	case f.HoldersError != "":
		res.Status, res.Message = Warn, "cannot list which containers hold HCAs: "+f.HoldersError
		res.Fix = "run on the node as root; the kubelet serves the PodResources API at " + counters.PodResourcesSocket
	default:
		overlaps := counters.Overlaps(f.Holders)
		if len(overlaps) == 0 {
			res.Status, res.Message = Pass, fmt.Sprintf("%d containers hold HCAs; no HCA held exclusively is shared", len(f.Holders))
			break
		}
		var msgs []string
		for _, o := range overlaps {
			msgs = append(msgs, o.Message())
		}
		res.Status, res.Message = Warn, strings.Join(msgs, "; ")
		res.Fix = "the exclusive pod was admitted after the sharers, which the kubelet allows (it counts the exclusive and the shared resource apart); " +
			"recreate the sharers named (a new shared slot leaves exclusively held HCAs out), or give the shared and exclusive pools disjoint selectors"
	}
	return res
}

// checkLinkErrors warns when a port's error counters are not zero. One
// reading cannot tell old errors from rising ones (the agent's
// RDMALinkErrors/RDMALinkFlapped node Events and the chart's alert follow
// the rise); a clean link counts none, and the counters only clear on a
// driver reload or perfquery -R, so any count is worth a look. It never
// fails: a port that still works is the ports check's business.
func checkLinkErrors(f Facts) Result {
	res := Result{Name: CheckLinkErrs}
	var read int
	var bad []string
	for _, p := range f.Counters {
		var parts []string
		for _, name := range counters.ErrorCounterNames() {
			v, ok := p.Counters[name]
			if !ok {
				continue
			}
			read++
			if v > 0 {
				parts = append(parts, fmt.Sprintf("%s=%d", name, v))
			}
		}
		if len(parts) > 0 {
			bad = append(bad, fmt.Sprintf("%s/%d %s", p.HCA, p.Port, strings.Join(parts, " ")))
		}
	}
	switch {
	case read == 0:
		res.Status, res.Message = Pass, "no port error counters to read"
	case len(bad) > 0:
		res.Status = Warn
		res.Message = "error counters not zero since they were last cleared: " + strings.Join(bad, ", ")
		res.Fix = "run again to see whether they rise (the agent sends RDMALinkErrors/RDMALinkFlapped node Events when they do); " +
			"link_downed counts the link going down, symbol_error and link_error_recovery point at a marginal cable or transceiver: " +
			"check with ibstat and perfquery -x, reseat or replace the cable"
	default:
		res.Status, res.Message = Pass, fmt.Sprintf("%d ports, no link errors", len(f.Counters))
	}
	return res
}

func checkDevices(f Facts) Result {
	res := Result{Name: CheckDevices}
	switch {
	case f.ScanError != "":
		res.Status, res.Message = Fail, "cannot list RDMA devices: "+f.ScanError
		res.Fix = "run on the node (or pass --sysfs-root/--dev-root); check that the InfiniBand driver (mlx5_ib) is loaded"
	case len(f.Node.HCAs) == 0:
		res.Status, res.Message = Fail, "no RDMA devices found"
		res.Fix = "use a VM size with InfiniBand (e.g. ND H100 v5) and load the driver (modprobe mlx5_ib, or install the Network Operator/DOCA OFED driver)"
	default:
		var bad []string
		for _, h := range f.Node.HCAs {
			if !h.Healthy {
				bad = append(bad, fmt.Sprintf("%s (%s)", h.Name, h.HealthReason))
			}
		}
		names := hcaNames(f.Node.HCAs)
		if len(bad) > 0 {
			// An unhealthy HCA is not advertised: exclusive pods asking for
			// every rail cannot be placed here, shared pods lose a rail.
			res.Status = Fail
			res.Message = fmt.Sprintf("%d RDMA devices (%s), %d unhealthy: %s", len(names), strings.Join(names, ", "), len(bad), strings.Join(bad, "; "))
			res.Fix = "an unhealthy HCA is not advertised; a missing /dev/infiniband/uverbsN usually means ib_uverbs is not loaded yet; `ibkube node` shows each reason"
		} else {
			res.Status = Pass
			res.Message = fmt.Sprintf("%d RDMA devices: %s", len(names), strings.Join(names, ", "))
		}
	}
	return res
}

// checkPorts fails when any port is not both ACTIVE (logical state, set by
// the subnet manager on InfiniBand) and LinkUp (physical state), and names
// the cause each state pair points to, so the fix goes to whoever can make
// it: the cable and switch, an administrator, or the subnet manager.
func checkPorts(f Facts) Result {
	res := Result{Name: CheckPorts}
	var total, usable int
	var bad, causes []string
	for _, h := range f.Node.HCAs {
		for _, p := range h.Ports {
			total++
			if p.State == inventory.PortStateActive && p.PhysState == inventory.PortPhysStateUp {
				usable++
				continue
			}
			bad = append(bad, fmt.Sprintf("%s/%d %s (%s)", h.Name, p.Number, orUnreadable(p.State), orUnreadable(p.PhysState)))
			if c := portCause(p); !slices.Contains(causes, c) {
				causes = append(causes, c)
			}
		}
	}
	switch {
	case total == 0:
		res.Status, res.Message = Fail, "no RDMA ports found"
		res.Fix = "see rdma-devices"
	case usable == 0:
		res.Status, res.Message = Fail, fmt.Sprintf("no port is ACTIVE and LinkUp: %s", strings.Join(bad, ", "))
		res.Fix = strings.Join(causes, "; ")
	case len(bad) > 0:
		// One rail down is a broken node for a job that spans them all.
		res.Status, res.Message = Fail, fmt.Sprintf("%d/%d ports ACTIVE and LinkUp; not: %s", usable, total, strings.Join(bad, ", "))
		res.Fix = strings.Join(causes, "; ")
	default:
		res.Status, res.Message = Pass, fmt.Sprintf("%d/%d ports ACTIVE", usable, total)
	}
	return res
}

// portCause reads a port's two states the way the InfiniBand link state
// machine defines them (physical states: include/rdma/ib_verbs.h
// enum ib_port_phys_state, printed by drivers/infiniband/core/sysfs.c
// phys_state_to_str; logical states: enum ib_port_state). A RoCE port has no
// subnet manager: its state follows its netdev (mlx5 reports DOWN/Disabled
// while the netdev is down or has no carrier).
func portCause(p inventory.Port) string {
	roce := p.LinkLayer == inventory.LinkLayerEthernet
	switch {
	case p.State == "" || p.PhysState == "":
		return "a port state could not be read: see rdma-devices for the cause"
	case roce && p.PhysState != inventory.PortPhysStateUp:
		return fmt.Sprintf("RoCE port %s: its netdev%s is down or has no carrier; check `ip link`, the cable and the switch port", p.PhysState, netdevName(p))
	case p.PhysState == "Polling":
		return "Polling: no physical link; the cable is unplugged or faulty, or the switch port is down"
	case p.PhysState == "Disabled":
		return "Disabled: the port is administratively disabled (on this host or by the switch); enable it (`ibportstate <lid> <port> enable`, or on the switch)"
	case p.PhysState == "Sleep":
		return "Sleep: the port is asleep (its link-down default); check the cable and that the switch port is enabled"
	case p.PhysState == "PortConfigurationTraining":
		return "PortConfigurationTraining: link training with the switch has not finished; a cable or switch port that cannot run the port's speed keeps it here"
	case p.PhysState == "LinkErrorRecovery":
		return "LinkErrorRecovery: the link is recovering from errors; a bad cable or connector, check `ibstat` and the port's error counters"
	case p.PhysState != inventory.PortPhysStateUp:
		return fmt.Sprintf("physical state %s: check the port with `ibstat`", p.PhysState)
	case p.State == "INIT":
		return "INIT with the link up: no subnet manager has configured the port; check that an SM runs on the fabric and sees this port (on Azure the VM must be in the scale set's InfiniBand partition)"
	case p.State == "ARMED":
		return "ARMED with the link up: the subnet manager configured the port but has not activated it; it should become ACTIVE at the SM's next sweep, else check the SM's log"
	default:
		return fmt.Sprintf("%s with the link up: the subnet manager has not brought the port up; check the SM and `ibstat`", p.State)
	}
}

func netdevName(p inventory.Port) string {
	if p.Netdev == "" {
		return ""
	}
	return " " + p.Netdev
}

func orUnreadable(s string) string {
	if s == "" {
		return "unreadable"
	}
	return s
}

func checkNetdevs(f Facts) Result {
	res := Result{Name: CheckNetdevs}
	var up, notUp []string
	ibPorts := 0
	for _, h := range f.Node.HCAs {
		for _, p := range h.Ports {
			if p.LinkLayer != inventory.LinkLayerInfiniBand {
				continue
			}
			ibPorts++
			if p.Netdev == "" {
				continue
			}
			state := f.Netdevs[p.Netdev]
			if state == "up" {
				up = append(up, p.Netdev)
			} else {
				if state == "" {
					state = "unknown"
				}
				notUp = append(notUp, fmt.Sprintf("%s (%s/%d) %s", p.Netdev, h.Name, p.Number, state))
			}
		}
	}
	switch {
	case ibPorts == 0 && len(f.Node.HCAs) > 0:
		res.Status, res.Message = Pass, "no InfiniBand ports (RoCE/Ethernet only): IPoIB not used"
	case len(up) == 0 && len(notUp) == 0:
		res.Status, res.Message = Warn, "no IPoIB interfaces on the InfiniBand ports"
		res.Fix = "the ibkube-ipoib network needs IPoIB (modprobe ib_ipoib); RDMA verbs work without it"
	case len(notUp) > 0:
		res.Status = Fail
		res.Message = fmt.Sprintf("IPoIB interfaces not up: %s", strings.Join(notUp, ", "))
		if len(up) > 0 {
			res.Message += fmt.Sprintf("; up: %s", strings.Join(up, ", "))
		}
		res.Fix = "bring them up (ip link set <if> up) and check their port is ACTIVE; pods on the ibkube-ipoib network get no traffic through a down parent"
	default:
		res.Status, res.Message = Pass, fmt.Sprintf("IPoIB up: %s", strings.Join(up, ", "))
	}
	return res
}

func checkNRI(f Facts) Result {
	res := Result{Name: CheckNRI}
	switch {
	case !f.NRI.Enabled:
		res.Status, res.Message = Warn, "NRI disabled in the agent (--nri=false): non-root RDMA containers keep the runtime's default memlock"
		res.Fix = "enable --nri, or give RDMA containers IPC_LOCK and run them as root"
	case f.NRI.Reachable:
		res.Status, res.Message = Pass, fmt.Sprintf("NRI socket %s reachable: the agent sets RLIMIT_MEMLOCK for RDMA containers", f.NRI.Socket)
	default:
		res.Status = Warn
		res.Message = fmt.Sprintf("NRI socket %s not reachable (%s): memlock is not raised for non-root RDMA containers", f.NRI.Socket, f.NRI.Error)
		res.Fix = "use containerd 2.x (NRI on by default) or enable [plugins.\"io.containerd.nri.v1.nri\"] disable = false in containerd 1.7; or set --nri-socket"
	}
	return res
}

// memlockFloor is the least hard memlock that is "enough" for RDMA without a
// warning: registering GPU or host buffers needs far more than the 64 KiB or
// 8 MiB defaults.
const memlockFloor = 1 << 30

func checkMemlock(f Facts) Result {
	res := Result{Name: CheckMemlock}
	if f.Runtime == nil {
		res.Status = Warn
		res.Message = "cannot read the container runtime's memlock: " + f.RuntimeError
		if f.MemlockMax != nil {
			res.Message += fmt.Sprintf("; the agent caps requests at --memlock-max=%s", memlock.FormatBytes(*f.MemlockMax))
		} else {
			res.Message += "; without --memlock-max the agent does not raise memlock"
		}
		res.Fix = "run with --proc-root pointing at the host's /proc (hostPID), or set --memlock-max to what the runtime can grant"
		return res
	}
	rl := *f.Runtime
	capV := rl.Limit.Hard
	if f.MemlockMax != nil && *f.MemlockMax < capV {
		capV = *f.MemlockMax
	}
	msg := fmt.Sprintf("%s (pid %d) memlock soft %s, hard %s: containers default to %s; RDMA containers can get up to %s",
		runtimeName(rl), rl.PID, memlock.FormatBytes(rl.Limit.Soft), memlock.FormatBytes(rl.Limit.Hard), memlock.FormatBytes(rl.Limit.Soft), memlock.FormatBytes(capV))
	if capV < memlockFloor {
		res.Status, res.Message = Warn, msg
		res.Fix = "set LimitMEMLOCK=infinity for the runtime (systemctl edit containerd) so RDMA containers can register large buffers; requests above the cap are clamped"
		return res
	}
	res.Status, res.Message = Pass, msg
	return res
}

func runtimeName(rl memlock.RuntimeLimit) string {
	if rl.Source == "peer" || rl.Source == "" {
		return "runtime"
	}
	return rl.Source
}

func checkAdvertise(f Facts) Result {
	res := Result{Name: CheckAdvertise}
	if len(f.Advertised) == 0 {
		res.Status, res.Message = Fail, "no resource pools configured"
		res.Fix = "check the agent config's pools"
		return res
	}
	var parts, empty []string
	usable := 0
	for _, a := range f.Advertised {
		if a.Healthy == 0 {
			empty = append(empty, a.Resource)
		} else {
			usable++
		}
		unit := "devices"
		if a.Mode == "shared" {
			unit = "slots"
		}
		parts = append(parts, fmt.Sprintf("%s %d/%d %s healthy (%s, HCAs: %s)", a.Resource, a.Healthy, a.Devices, unit, a.Mode, orNone(a.HCAs)))
	}
	msg := strings.Join(parts, "; ")
	switch {
	case usable == 0:
		res.Status, res.Message = Fail, "nothing healthy to advertise: "+msg
		res.Fix = "no HCA matches a pool's selector (the default pools take InfiniBand HCAs only: RoCE nodes need linkLayers: [Ethernet] in the agent config), or every selected HCA is unhealthy; see rdma-devices and `ibkube node`"
	case len(empty) > 0:
		res.Status, res.Message = Warn, msg
		res.Fix = fmt.Sprintf("%s advertise nothing healthy: check the pool selectors in the agent config", strings.Join(empty, ", "))
	default:
		res.Status, res.Message = Pass, msg
	}
	return res
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ",")
}

func hcaNames(hs []inventory.HCA) []string {
	out := make([]string, 0, len(hs))
	for _, h := range hs {
		out = append(out, h.Name)
	}
	return out
}

// WriteText writes one line per check: "PASS name  message", with the fix
// indented below failed and warned checks.
func (r Report) WriteText(w io.Writer) error {
	width := 0
	for _, res := range r.Results {
		width = max(width, len(res.Name))
	}
	var b strings.Builder
	for _, res := range r.Results {
		fmt.Fprintf(&b, "%-4s  %-*s  %s\n", res.Status, width, res.Name, Printable(res.Message))
		if res.Fix != "" && res.Status != Pass {
			fmt.Fprintf(&b, "      %*s  fix: %s\n", width, "", Printable(res.Fix))
		}
	}
	counts := map[Status]int{}
	for _, res := range r.Results {
		counts[res.Status]++
	}
	fmt.Fprintf(&b, "\n%d passed, %d warnings, %d failed", counts[Pass], counts[Warn], counts[Fail])
	if counts[Skip] > 0 {
		fmt.Fprintf(&b, ", %d skipped", counts[Skip])
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// Printable escapes what must not reach a terminal as is: messages name
// devices and netdevs read from the node, and a name may carry escape
// sequences. Each rune that is not printable (or invalid UTF-8) is written
// as its Go escape (\x1b), the rest unchanged.
func Printable(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i, w := 0, 0; i < len(s); i += w {
		r, n := utf8.DecodeRuneInString(s[i:])
		w = n
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unicode.IsPrint(r):
			b.WriteRune(r)
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
	}
	return b.String()
}

// WriteJSON writes the report as indented JSON.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
