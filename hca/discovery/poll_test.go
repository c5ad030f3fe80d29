package discovery

import (
	"context"
	"testing"

	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/hca/inventory"
)

// TestPollHintsWhenAScanSawAnotherState is a port that goes down and back
// up between two polls while the consumer rescans for another reason (its
// periodic rescan, a netlink event) and sees it down: the poll reads the
// same state as its previous read, yet must hint, or the consumer keeps the
// port down until its next periodic rescan.
func TestPollHintsWhenAScanSawAnotherState(t *testing.T) {
	t.Parallel()
	dir := fixture.BuildTemp(t, fixture.NDv5)
	s := NewScanner(Options{SysfsRoot: fixture.SysfsRoot(dir), DevRoot: fixture.DevRoot(dir)})
	ctx := context.Background()
	if _, err := s.Scan(ctx); err != nil {
		t.Fatal(err)
	}
	p := newPortPoller(fixture.SysfsRoot(dir), s.scannedPort)
	p.refresh()
	if p.poll() {
		t.Fatal("poll hinted on an idle fixture the consumer has just scanned")
	}

	if err := fixture.SetPortState(dir, "mlx5_3", 1, "DOWN"); err != nil {
		t.Fatal(err)
	}
	node, err := s.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := portOf(t, node.HCAs, "mlx5_3").State; got != "DOWN" {
		t.Fatalf("scan saw mlx5_3 port 1 %s, want DOWN", got)
	}
	if err := fixture.SetPortState(dir, "mlx5_3", 1, "ACTIVE"); err != nil {
		t.Fatal(err)
	}
	if !p.poll() {
		t.Fatal("poll read the same state as before but the consumer's last scan saw DOWN: want a hint")
	}
	if _, err := s.Scan(ctx); err != nil {
		t.Fatal(err)
	}
	if p.poll() {
		t.Fatal("poll hinted again after the consumer rescanned and agrees with it")
	}
}

func portOf(t *testing.T, hcas []inventory.HCA, name string) inventory.Port {
	t.Helper()
	for _, h := range hcas {
		if h.Name == name && len(h.Ports) > 0 {
			return h.Ports[0]
		}
	}
	t.Fatalf("no HCA %s with a port in the scan", name)
	return inventory.Port{}
}
