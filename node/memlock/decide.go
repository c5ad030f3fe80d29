// Package memlock decides the RLIMIT_MEMLOCK of containers that hold
// ibkube's RDMA char devices, and the NCCL conf file that gives the
// processes such a container starts with an empty environment (MPI ranks
// over SSH) the NCCL settings of its main process (rankconf.go); the NRI
// plugin (package nri) applies both through the container runtime.
//
// Decide is the pure core: pod annotations, the container's Linux devices,
// the ibkube char devices of this node, the runtime's own memlock limits and
// the configured maximum go in; the (soft, hard) limit to set, or none, and a
// reason come out. Reading the runtime's limits from /proc (runtime.go) is
// the package's only I/O.
package memlock

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/internal/memlockvalue"
)

// Unlimited is RLIM_INFINITY as the kernel and the OCI spec spell it.
const Unlimited = memlockvalue.Unlimited

// RlimitType is the OCI/NRI name of the limit this package sets.
const RlimitType = "RLIMIT_MEMLOCK"

// DevicePathPrefix is where ibkube's char devices appear inside a container.
const DevicePathPrefix = "/dev/" + inventory.DevInfinibandPath + "/"

// Device is one Linux device of a container as the runtime reports it.
type Device struct {
	Path  string
	Type  string // "c" (char), "b" (block), "u", "p"
	Major int64
	Minor int64
}

// Limit is a soft/hard rlimit pair; Unlimited means no limit.
type Limit struct {
	Soft uint64 `json:"soft"`
	Hard uint64 `json:"hard"`
}

// DeviceSet is the set of ibkube char devices on this node, by major:minor.
type DeviceSet map[[2]int64]string

// DevicesOf returns the char devices discovery found on the node: every HCA's
// uverbs, umad and issm nodes and the shared rdma_cm.
func DevicesOf(n inventory.Node) DeviceSet {
	set := DeviceSet{}
	add := func(c inventory.CharDevice) {
		if c.Major == 0 && c.Minor == 0 {
			return
		}
		set[[2]int64{int64(c.Major), int64(c.Minor)}] = c.Name
	}
	for _, h := range n.HCAs {
		for _, c := range h.CharDevices {
			add(c)
		}
	}
	if n.RDMACM != nil {
		add(*n.RDMACM)
	}
	return set
}

// Input is everything Decide looks at.
type Input struct {
	// PodAnnotations are the pod sandbox's annotations.
	PodAnnotations map[string]string
	// Devices are the container's Linux devices.
	Devices []Device
	// Existing is the container's RLIMIT_MEMLOCK when the spec (or an NRI
	// plugin that ran before us) already sets one, else nil.
	Existing *Limit
	// IBDevices are the node's ibkube char devices.
	IBDevices DeviceSet
	// Runtime is the runtime process's own RLIMIT_MEMLOCK (what a container
	// inherits when nothing sets it, and the most runc can grant), nil when
	// unknown.
	Runtime *Limit
	// Max is the configured cap (--memlock-max), nil when not configured.
	Max *uint64
}

// Outcome classifies a decision for metrics and tests.
type Outcome string

// Outcomes.
const (
	OutcomeSet          Outcome = "set"           // raised to the requested value
	OutcomeClamped      Outcome = "clamped"       // raised, but less than requested
	OutcomeNoAnnotation Outcome = "no_annotation" // the pod asks for nothing
	OutcomeNoDevices    Outcome = "no_devices"    // annotation without ibkube devices
	OutcomeInvalid      Outcome = "invalid"       // the annotation's value is bad
	OutcomeAlreadySet   Outcome = "already_set"   // the spec or another plugin sets memlock
	OutcomeNotNeeded    Outcome = "not_needed"    // the runtime's default already suffices
	OutcomeNoCap        Outcome = "no_cap"        // neither the runtime's limit nor a max is known
)

// Decision says what to do with one container.
type Decision struct {
	Outcome Outcome
	// Set is true when Limit must be applied.
	Set   bool
	Limit Limit
	// Requested is the annotation's value as given ("" when absent).
	Requested string
	// Device is the first ibkube device path found in the container.
	Device string
	// Reason explains the decision in one sentence, for logs and events.
	Reason string
}

// Decide returns the RLIMIT_MEMLOCK to set on a container, or none. It never
// asks for a hard limit above what the runtime holds or the configured
// maximum, since runc fails the container start ("error setting rlimit type
// 8: operation not permitted") when it cannot grant the limit.
func Decide(in Input) Decision {
	raw, ok := in.PodAnnotations[contract.AnnotationMemlock]
	if !ok {
		return Decision{Outcome: OutcomeNoAnnotation, Reason: "pod has no " + contract.AnnotationMemlock + " annotation"}
	}
	d := Decision{Requested: raw}
	d.Device = ibkubeDevice(in.Devices, in.IBDevices)
	if d.Device == "" {
		d.Outcome = OutcomeNoDevices
		d.Reason = fmt.Sprintf("container holds no ibkube RDMA device under %s; %s=%q is ignored", DevicePathPrefix, contract.AnnotationMemlock, raw)
		return d
	}
	want, err := ParseValue(raw)
	if err != nil {
		d.Outcome = OutcomeInvalid
		d.Reason = fmt.Sprintf("memlock not raised: %v", err)
		return d
	}
	if in.Existing != nil {
		d.Outcome = OutcomeAlreadySet
		d.Reason = fmt.Sprintf("memlock left at %s: the container spec or an earlier NRI plugin already sets %s, and a second NRI adjustment of it would fail the container",
			FormatLimit(*in.Existing), RlimitType)
		return d
	}
	if in.Runtime == nil && in.Max == nil {
		d.Outcome = OutcomeNoCap
		d.Reason = "memlock not raised: the runtime's memlock limit is unknown and no maximum is configured (--memlock-max)"
		return d
	}
	limit, capBy := want, ""
	if in.Runtime != nil && in.Runtime.Hard < limit {
		limit, capBy = in.Runtime.Hard, "the runtime's hard limit "+FormatBytes(in.Runtime.Hard)
	}
	if in.Max != nil && *in.Max < limit {
		limit, capBy = *in.Max, "the configured maximum "+FormatBytes(*in.Max)
	}
	if in.Runtime != nil && in.Runtime.Soft >= limit {
		d.Outcome = OutcomeNotNeeded
		d.Reason = fmt.Sprintf("memlock left at the runtime's default %s, which already covers %s", FormatLimit(*in.Runtime), FormatBytes(limit))
		return d
	}
	d.Set = true
	d.Limit = Limit{Soft: limit, Hard: limit}
	if capBy != "" {
		d.Outcome = OutcomeClamped
		d.Reason = fmt.Sprintf("memlock set to %s, clamped from the requested %s to %s", FormatBytes(limit), FormatBytes(want), capBy)
		return d
	}
	d.Outcome = OutcomeSet
	d.Reason = fmt.Sprintf("memlock set to %s as requested", FormatBytes(limit))
	return d
}

// ibkubeDevice returns the container path of the first char device that is
// one of the node's ibkube devices (same major:minor) and sits under
// /dev/infiniband/, or "".
func ibkubeDevice(devs []Device, ib DeviceSet) string {
	for _, dv := range devs {
		if dv.Type != "c" || !strings.HasPrefix(dv.Path, DevicePathPrefix) {
			continue
		}
		if _, ok := ib[[2]int64{dv.Major, dv.Minor}]; ok {
			return dv.Path
		}
	}
	return ""
}

// ParseValue parses the annotation's value with the rule the webhook
// admits it by (internal/memlockvalue): "unlimited" or a Kubernetes quantity
// of bytes ("64Gi", "8388608", "512M"). Zero, negative, fractional and
// out-of-range values are errors that name the annotation, the value and
// what is accepted.
func ParseValue(s string) (uint64, error) {
	v, err := memlockvalue.Parse(s)
	if err != nil {
		return 0, fmt.Errorf("%s=%w", contract.AnnotationMemlock, err)
	}
	return v, nil
}

// FormatBytes prints a limit the way people write it: "unlimited", "8Mi",
// "65536".
func FormatBytes(v uint64) string {
	if v == Unlimited {
		return "unlimited"
	}
	if v > math.MaxInt64 {
		return strconv.FormatUint(v, 10)
	}
	return resource.NewQuantity(int64(v), resource.BinarySI).String()
}

// FormatLimit prints soft:hard.
func FormatLimit(l Limit) string {
	return FormatBytes(l.Soft) + ":" + FormatBytes(l.Hard)
}

// ParseMax parses a --memlock-max value: "" (no cap beyond the runtime's),
// "unlimited" or a quantity.
func ParseMax(s string) (*uint64, error) {
	if s == "" {
		return nil, nil
	}
	v, err := ParseValue(s)
	if err != nil {
		return nil, fmt.Errorf("--memlock-max=%q: want \"unlimited\" or a quantity such as \"64Gi\"", s)
	}
	return &v, nil
}
