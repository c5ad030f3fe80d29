package memlock

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/internal/memlockvalue"
)

func TestDecide(t *testing.T) {
	t.Parallel()
	const (
		kib = 1024
		mib = 1024 * kib
		gib = 1024 * mib
	)
	ib := DevicesOf(inventory.Node{
		HCAs: []inventory.HCA{{Name: "mlx5_0", CharDevices: []inventory.CharDevice{
			{Name: "uverbs0", Major: 231, Minor: 192, Present: true},
			{Name: "umad0", Port: 1, Major: 231, Minor: 0, Present: true},
		}}},
		RDMACM: &inventory.CharDevice{Name: "rdma_cm", Major: 10, Minor: 58, Present: true},
	})
	uverbs := []Device{{Path: "/dev/infiniband/uverbs0", Type: "c", Major: 231, Minor: 192}}
	anno := func(v string) map[string]string { return map[string]string{contract.AnnotationMemlock: v} }
	rt := &Limit{Soft: 64 * kib, Hard: 8 * mib}
	rtUnlimited := &Limit{Soft: Unlimited, Hard: Unlimited}
	u := func(v uint64) *uint64 { return &v }
	// What a request gets when the container holds no ibkube device.
	noDevices := func(requested string) Decision {
		return Decision{Outcome: OutcomeNoDevices, Requested: requested,
			Reason: `container holds no ibkube RDMA device under /dev/infiniband/; infiniband.azure.com/memlock="` + requested + `" is ignored`}
	}

	tests := []struct {
		name string
		in   Input
		want Decision
	}{{
		name: "no annotation",
		in:   Input{Devices: uverbs, IBDevices: ib, Runtime: rt},
		want: Decision{Outcome: OutcomeNoAnnotation, Reason: "pod has no infiniband.azure.com/memlock annotation"},
	}, {
		name: "annotation without devices gains nothing",
		in:   Input{PodAnnotations: anno("unlimited"), Devices: []Device{{Path: "/dev/null", Type: "c", Major: 1, Minor: 3}}, IBDevices: ib, Runtime: rt},
		want: noDevices("unlimited"),
	}, {
		name: "raised to the request",
		in:   Input{PodAnnotations: anno("8Mi"), Devices: uverbs, IBDevices: ib, Runtime: rt},
		want: Decision{Outcome: OutcomeSet, Set: true, Limit: Limit{8 * mib, 8 * mib}, Requested: "8Mi", Device: "/dev/infiniband/uverbs0",
			Reason: "memlock set to 8Mi as requested"},
	}, {
		name: "unlimited clamped to the runtime's hard limit",
		in:   Input{PodAnnotations: anno("unlimited"), Devices: uverbs, IBDevices: ib, Runtime: rt},
		want: Decision{Outcome: OutcomeClamped, Set: true, Limit: Limit{8 * mib, 8 * mib}, Requested: "unlimited", Device: "/dev/infiniband/uverbs0",
			Reason: "memlock set to 8Mi, clamped from the requested unlimited to the runtime's hard limit 8Mi"},
	}, {
		name: "unlimited granted when the runtime holds unlimited",
		in:   Input{PodAnnotations: anno("unlimited"), Devices: uverbs, IBDevices: ib, Runtime: &Limit{Soft: 8 * mib, Hard: Unlimited}},
		want: Decision{Outcome: OutcomeSet, Set: true, Limit: Limit{Unlimited, Unlimited}, Requested: "unlimited", Device: "/dev/infiniband/uverbs0",
			Reason: "memlock set to unlimited as requested"},
	}, {
		name: "configured maximum clamps below the runtime",
		in:   Input{PodAnnotations: anno("unlimited"), Devices: uverbs, IBDevices: ib, Runtime: &Limit{Soft: 64 * kib, Hard: Unlimited}, Max: u(64 * gib)},
		want: Decision{Outcome: OutcomeClamped, Set: true, Limit: Limit{64 * gib, 64 * gib}, Requested: "unlimited", Device: "/dev/infiniband/uverbs0",
			Reason: "memlock set to 64Gi, clamped from the requested unlimited to the configured maximum 64Gi"},
	}, {
		name: "runtime below the configured maximum wins",
		in:   Input{PodAnnotations: anno("64Gi"), Devices: uverbs, IBDevices: ib, Runtime: rt, Max: u(32 * gib)},
		want: Decision{Outcome: OutcomeClamped, Set: true, Limit: Limit{8 * mib, 8 * mib}, Requested: "64Gi", Device: "/dev/infiniband/uverbs0",
			Reason: "memlock set to 8Mi, clamped from the requested 64Gi to the runtime's hard limit 8Mi"},
	}, {
		name: "runtime unknown, configured maximum used",
		in:   Input{PodAnnotations: anno("64Gi"), Devices: uverbs, IBDevices: ib, Max: u(Unlimited)},
		want: Decision{Outcome: OutcomeSet, Set: true, Limit: Limit{64 * gib, 64 * gib}, Requested: "64Gi", Device: "/dev/infiniband/uverbs0",
			Reason: "memlock set to 64Gi as requested"},
	}, {
		name: "runtime unknown and no maximum: nothing",
		in:   Input{PodAnnotations: anno("64Gi"), Devices: uverbs, IBDevices: ib},
		want: Decision{Outcome: OutcomeNoCap, Requested: "64Gi", Device: "/dev/infiniband/uverbs0",
			Reason: "memlock not raised: the runtime's memlock limit is unknown and no maximum is configured (--memlock-max)"},
	}, {
		name: "runtime default already enough",
		in:   Input{PodAnnotations: anno("64Gi"), Devices: uverbs, IBDevices: ib, Runtime: rtUnlimited},
		want: Decision{Outcome: OutcomeNotNeeded, Requested: "64Gi", Device: "/dev/infiniband/uverbs0",
			Reason: "memlock left at the runtime's default unlimited:unlimited, which already covers 64Gi"},
	}, {
		name: "already set by spec or another plugin",
		in:   Input{PodAnnotations: anno("8Mi"), Devices: uverbs, IBDevices: ib, Runtime: rt, Existing: &Limit{Soft: 1 * gib, Hard: 1 * gib}},
		want: Decision{Outcome: OutcomeAlreadySet, Requested: "8Mi", Device: "/dev/infiniband/uverbs0",
			Reason: "memlock left at 1Gi:1Gi: the container spec or an earlier NRI plugin already sets RLIMIT_MEMLOCK, and a second NRI adjustment of it would fail the container"},
	}, {
		name: "minus one",
		in:   Input{PodAnnotations: anno("-1"), Devices: uverbs, IBDevices: ib, Runtime: rt},
		want: Decision{Outcome: OutcomeInvalid, Requested: "-1", Device: "/dev/infiniband/uverbs0",
			Reason: `memlock not raised: infiniband.azure.com/memlock="-1" is not positive (accepted: "unlimited" or a positive whole number of bytes as a Kubernetes quantity such as "64Gi")`},
	}, {
		name: "lots",
		in:   Input{PodAnnotations: anno("lots"), Devices: uverbs, IBDevices: ib, Runtime: rt},
		want: Decision{Outcome: OutcomeInvalid, Requested: "lots", Device: "/dev/infiniband/uverbs0",
			Reason: `memlock not raised: infiniband.azure.com/memlock="lots" is not a quantity (accepted: "unlimited" or a positive whole number of bytes as a Kubernetes quantity such as "64Gi")`},
	}, {
		name: "1e99",
		in:   Input{PodAnnotations: anno("1e99"), Devices: uverbs, IBDevices: ib, Runtime: rt},
		want: Decision{Outcome: OutcomeInvalid, Requested: "1e99", Device: "/dev/infiniband/uverbs0",
			Reason: `memlock not raised: infiniband.azure.com/memlock="1e99" is too large (below 8Ei; accepted: "unlimited" or a positive whole number of bytes as a Kubernetes quantity such as "64Gi")`},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tt.want, Decide(tt.in)); diff != "" {
				t.Errorf("Decide() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDecideCountsIbkubeDevicesOnly: a container's device raises memlock
// only when it is one of the node's ibkube devices (its character
// major:minor) at its place under /dev/infiniband/.
func TestDecideCountsIbkubeDevicesOnly(t *testing.T) {
	t.Parallel()
	ib := DevicesOf(inventory.Node{
		HCAs:   []inventory.HCA{{Name: "mlx5_0", CharDevices: []inventory.CharDevice{{Name: "uverbs0", Major: 231, Minor: 192, Present: true}}}},
		RDMACM: &inventory.CharDevice{Name: "rdma_cm", Major: 10, Minor: 58, Present: true},
	})
	for _, tc := range []struct {
		name   string
		device Device
		counts bool
	}{
		{"uverbs0", Device{Path: "/dev/infiniband/uverbs0", Type: "c", Major: 231, Minor: 192}, true},
		{"rdma_cm alone", Device{Path: "/dev/infiniband/rdma_cm", Type: "c", Major: 10, Minor: 58}, true},
		{"a device under /dev/infiniband that is not ibkube's", Device{Path: "/dev/infiniband/uverbs9", Type: "c", Major: 231, Minor: 201}, false},
		{"ibkube's major:minor at another path", Device{Path: "/dev/uverbs0", Type: "c", Major: 231, Minor: 192}, false},
		{"a block device with the same numbers", Device{Path: "/dev/infiniband/uverbs0", Type: "b", Major: 231, Minor: 192}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := Decide(Input{PodAnnotations: map[string]string{contract.AnnotationMemlock: "8Mi"}, Devices: []Device{tc.device}, IBDevices: ib, Runtime: &Limit{Soft: 64 << 10, Hard: 8 << 20}})
			if counts := got.Outcome != OutcomeNoDevices; counts != tc.counts || (counts && got.Device != tc.device.Path) {
				t.Errorf("Decide() = %s for device %s (reason: %s); want it counted: %t", got.Outcome, got.Device, got.Reason, tc.counts)
			}
		})
	}
}

// TestParseValue: ParseValue accepts what memlockvalue.Parse accepts (its
// rules and their table are memlockvalue's) and names the annotation in
// front of the value it refuses, keeping the *memlockvalue.Error.
func TestParseValue(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"unlimited", " Unlimited ", "64Gi", "1.5Gi", "9223372036854775806",
		"9223372036854775807", "", "0", "-64Gi", "lots", "64GB", "1e99", "100m"} {
		got, err := ParseValue(in)
		want, parseErr := memlockvalue.Parse(in)
		if parseErr == nil {
			if err != nil || got != want {
				t.Errorf("ParseValue(%q) = %d, %v; want %d", in, got, err, want)
			}
			continue
		}
		var e *memlockvalue.Error
		if wantMsg := contract.AnnotationMemlock + "=" + parseErr.Error(); err == nil || err.Error() != wantMsg || !errors.As(err, &e) {
			t.Errorf("ParseValue(%q) error = %v, want %q wrapping a *memlockvalue.Error", in, err, wantMsg)
		}
	}
}

func FuzzParseValue(f *testing.F) {
	for _, s := range []string{"unlimited", "64Gi", "-1", "lots", "1e99", "1.5Gi", "100m"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseValue(s)
		if err == nil && v == 0 {
			t.Fatalf("ParseValue(%q) accepted zero", s)
		}
	})
}
