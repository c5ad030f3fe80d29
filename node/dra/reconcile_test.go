package dra

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ibkube/ibkube/hca/fixture"
)

type eventLog struct {
	mu     sync.Mutex
	events []string
}

func (l *eventLog) NodeEvent(reason, message string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, reason+": "+message)
}

// TestReconcileCDIRemovesStaleSpecs: specs whose claims the API server no
// longer has (deleted, replaced by a claim of the same name, deallocated)
// are removed, counted and reported, and the HCA one held is prepared for
// a new claim; the spec of a live claim stays.
func TestReconcileCDIRemovesStaleSpecs(t *testing.T) {
	t.Parallel()
	h := newHost(t, fixture.NDv5, nil)
	cdi := t.TempDir()
	// The specs an earlier agent left, for claims as they were then.
	old := newDriver(t, h, cdi)
	live := claim("live", "live", alloc("nic", "ib-mlx5-0"))
	deleted := claim("deleted", "deleted", alloc("nic", "ib-mlx5-1"))
	replaced := claim("replaced-old", "replaced", alloc("nic", "ib-mlx5-2"))
	deallocated := claim("deallocated", "deallocated", shared("s", "shared-ib-mlx5-3", "x"))
	for _, c := range []*resourceapi.ResourceClaim{live, deleted, replaced, deallocated} {
		mustPrepare(t, old, c)
	}
	// What the API server has now.
	replacement := claim("replaced-new", "replaced", alloc("nic", "ib-mlx5-5"))
	unallocated := deallocated.DeepCopy()
	unallocated.Status.Allocation = nil
	client := fake.NewClientset(live, replacement, unallocated)

	events := &eventLog{}
	d := newDriver(t, h, cdi)
	d.cfg.Claims, d.cfg.Events = client.ResourceV1(), events
	n, err := d.ReconcileCDI(context.Background())
	if err != nil || n != 3 {
		t.Fatalf("ReconcileCDI = %d, %v; want 3 removed", n, err)
	}
	for _, c := range []struct {
		uid  types.UID
		kept bool
	}{{live.UID, true}, {deleted.UID, false}, {replaced.UID, false}, {deallocated.UID, false}} {
		spec, err := d.store.read(c.uid)
		if err != nil || (spec != nil) != c.kept {
			t.Errorf("spec of %s: %v, %v; kept want %t", c.uid, spec != nil, err, c.kept)
		}
	}
	if v := testutil.ToFloat64(d.metrics.staleSpecs); v != 3 {
		t.Errorf("ibkube_node_agent_dra_stale_cdi_specs_removed_total = %v, want 3", v)
	}
	if len(events.events) != 3 || !strings.Contains(strings.Join(events.events, "\n"), ReasonStaleCDISpec+": removed the CDI spec of claim team/deleted") {
		t.Errorf("events %v, want three %s naming the claims", events.events, ReasonStaleCDISpec)
	}
	// The HCA the deleted claim's spec held goes to a new claim.
	next := claim("next", "next", alloc("nic", "ib-mlx5-1"))
	if r := prepare(t, d, next)[next.UID]; r.Err != nil {
		t.Errorf("prepare on the freed mlx5_1: %v", r.Err)
	}
	// And the live claim's HCA is still its own.
	thief := claim("thief", "thief", alloc("nic", "ib-mlx5-0"))
	if r := prepare(t, d, thief)[thief.UID]; r.Err == nil {
		t.Error("the live claim's mlx5_0 was prepared for another claim")
	}
}

// countingLimiter counts the reads it paced and refuses after allow.
type countingLimiter struct {
	mu           sync.Mutex
	waits, allow int
}

func (l *countingLimiter) Wait(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.waits == l.allow {
		return context.DeadlineExceeded
	}
	l.waits++
	return nil
}

// TestReconcileCDIPacedByItsLimiter: every claim read of the reconcile
// waits on the reconcile's own limiter, and a round whose limiter gives up
// (the agent stopping) stops reading and removes nothing more.
func TestReconcileCDIPacedByItsLimiter(t *testing.T) {
	t.Parallel()
	h := newHost(t, fixture.NDv5, nil)
	cdi := t.TempDir()
	old := newDriver(t, h, cdi)
	for _, name := range []string{"gone-0", "gone-1", "gone-2", "gone-3"} {
		c := claim(name, name, shared("s", "shared-ib-mlx5-3", types.UID(name)))
		mustPrepare(t, old, c)
	}
	client := fake.NewClientset()
	limiter := &countingLimiter{allow: 2}
	d := newDriver(t, h, cdi)
	d.cfg.Claims, d.cfg.ReconcileLimiter = client.ResourceV1(), limiter
	n, err := d.ReconcileCDI(context.Background())
	if n != 2 || err == nil || !strings.Contains(err.Error(), "reconcile CDI specs") {
		t.Errorf("ReconcileCDI with a limiter that allows 2 reads = %d, %v; want 2 removed and the limiter's error", n, err)
	}
	if gets := len(client.Actions()); gets != limiter.waits {
		t.Errorf("%d claim reads for %d waits on the limiter; every read must wait", gets, limiter.waits)
	}
	limiter.allow = 10
	if n, err := d.ReconcileCDI(context.Background()); n != 2 || err != nil {
		t.Errorf("the next round = %d, %v; want the other 2 removed", n, err)
	}
}
