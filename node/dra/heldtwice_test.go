package dra

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/node/dra/holds"
)

// TestHeldTwiceAtStart: CDI specs left by claims prepared before HCA holds
// (an exclusive hold and a share of mlx5_0, an older agent's device-named
// exclusive hold of mlx5_1 beside a share of it) are found when the driver
// starts: an HCAHeldTwice Event naming the HCA and the claims, and the
// gauge; HCAs held one way are not reported.
func TestHeldTwiceAtStart(t *testing.T) {
	t.Parallel()
	h := newHost(t, fixture.NDv5, nil)
	cdi := t.TempDir()
	d := newDriver(t, h, cdi)
	m := h.model(t)
	write := func(uid types.UID, reqs ...Request) {
		t.Helper()
		spec, err := ClaimSpec(uid, "team/"+string(uid)[:8], reqs)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.store.write(uid, spec); err != nil {
			t.Fatal(err)
		}
	}
	device := func(name string) []Device {
		dev, err := lookup(m, name)
		if err != nil {
			t.Fatal(err)
		}
		return []Device{dev}
	}
	exclusive, sharer, legacy, legacySharer, alone := testUID("exclusive"), testUID("sharer"), testUID("legacy"), testUID("legacy-sharer"), testUID("alone")
	write(exclusive, Request{Name: "nic", Devices: device("ib-mlx5-0")})
	write(sharer, Request{Name: "s", Devices: device("shared-ib-mlx5-0")})
	write(legacySharer, Request{Name: "s", Devices: device("shared-ib-mlx5-1")})
	write(alone, Request{Name: "nic", Devices: device("ib-mlx5-2")})
	// An agent before HCA holds named exclusive devices.
	spec, err := ClaimSpec(legacy, "team/legacy", []Request{{Name: "nic", Devices: device("ib-mlx5-1")}})
	if err != nil {
		t.Fatal(err)
	}
	delete(spec.Annotations, holds.AnnotationExclusive)
	spec.Annotations[holds.AnnotationLegacyExclusive] = "ib-mlx5-1"
	if err := d.store.write(legacy, spec); err != nil {
		t.Fatal(err)
	}

	l, err := holds.List(cdi, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := holds.FindHeldTwice(l.Holds, m)
	want := []holds.HeldTwice{
		{HCA: "mlx5_0", Exclusive: []types.UID{exclusive}, Shared: []types.UID{sharer}},
		{HCA: "mlx5_1", Exclusive: []types.UID{legacy}, Shared: []types.UID{legacySharer}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("held twice (-want +got):\n%s", diff)
	}

	events := &eventLog{}
	d.cfg.Events = events
	d.reportHeldTwice()
	if v := testutil.ToFloat64(d.metrics.heldTwice); v != 2 {
		t.Errorf("ibkube_node_agent_dra_hcas_held_twice = %v, want 2", v)
	}
	all := strings.Join(events.events, "\n")
	if len(events.events) != 2 || !strings.Contains(all, ReasonHCAHeldTwice+": HCA mlx5_0 is held exclusively by claim "+string(exclusive)+" and also by claim "+string(sharer)) {
		t.Errorf("events %v, want two %s naming mlx5_0, mlx5_1 and their claims", events.events, ReasonHCAHeldTwice)
	}
	if strings.Contains(all, "mlx5_2") {
		t.Errorf("an HCA held one way was reported: %v", events.events)
	}
}
