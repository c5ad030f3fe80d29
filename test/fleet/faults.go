//go:build fleet

package fleet

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/fixture"
)

// flapStorm takes 1 % of the fleet's ports down each period and brings the
// previous period's back up, for s.flap, as a fabric with bad cables does;
// the agents see it in their periodic rescan. It measures the agents'
// request rate meanwhile and the most slice or Node writes one node made
// per minute.
func (f *fleet) flapStorm(t *testing.T) {
	var all []portRef
	for _, n := range f.nodes {
		ps, err := ports(n)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, ps...)
	}
	per := max(1, len(all)/100)
	rng := rand.New(rand.NewPCG(1, 2))
	before := f.counters()
	start := time.Now()
	var down []portRef
	flaps := 0
	set := func(ps []portRef, state string) {
		for _, p := range ps {
			if err := fixture.SetPortState(p.node.dir, p.hca.Name, p.port.Number, state); err != nil {
				t.Errorf("port %s/%s: %v", p.node.name, p.hca.Name, err)
			}
		}
	}
	for time.Since(start) < f.s.flap {
		set(down, "ACTIVE")
		down = down[:0]
		for range per {
			down = append(down, all[rng.IntN(len(all))])
		}
		set(down, "DOWN")
		flaps += len(down)
		select {
		case <-f.ctx.Done():
			return
		case <-time.After(f.s.flapPeriod):
		}
	}
	set(down, "ACTIVE")
	secs := time.Since(start).Seconds()
	after := f.counters()
	var total, maxWrites int64
	for name, a := range after {
		b := before[name]
		total += a.total - b.total
		maxWrites = max(maxWrites, a.writes-b.writes)
	}
	res := flapResult{
		Ports: len(all), PortsPerPeriod: per, PeriodSeconds: f.s.flapPeriod.Seconds(), Seconds: secs, Flaps: flaps,
		RequestsPerNodePerSecond:  float64(total) / secs / float64(len(f.nodes)),
		MaxWritesPerNodePerMinute: float64(maxWrites) / (secs / 60),
	}
	f.report.Flap = res
	t.Logf("flap storm: %d of %d ports per %s for %s: %.4f requests/s per node, at most %.1f slice/Node writes per node per minute",
		per, len(all), f.s.flapPeriod, time.Since(start).Round(time.Second), res.RequestsPerNodePerSecond, res.MaxWritesPerNodePerMinute)
}

type flapResult struct {
	Ports, PortsPerPeriod, Flaps int
	PeriodSeconds, Seconds       float64
	RequestsPerNodePerSecond     float64
	MaxWritesPerNodePerMinute    float64
}

type counts struct{ total, writes int64 }

// counters sums per node across the agent instances that served it (a
// restarted agent's counts carry over through the node).
func (f *fleet) counters() map[string]counts {
	out := map[string]counts{}
	for _, n := range f.nodes {
		if r := n.live(); r != nil {
			out[n.name] = counts{r.counter.total.Load(), r.counter.sliceWrites.Load() + r.counter.nodeWrites.Load()}
		}
	}
	return out
}

// rollout restarts every agent as a DaemonSet rolling update with
// maxUnavailable 10 % does (the chart's default): a batch of agents exits
// (a planned exit: SIGTERM), their replacements start and the next batch
// goes once they are all Ready. Meanwhile pods with a claim keep coming
// (s.streamRate per second, each deleted after streamLife); the simulated
// kubelet prepares each through its node's live driver. A pod is stranded
// if no driver prepared it within a minute of its binding.
func (f *fleet) rollout(t *testing.T) {
	f.kubelet.reset()
	ctx, cancel := context.WithCancel(f.ctx)
	streamDone := f.stream(ctx, t)
	start := time.Now()
	batch := max(1, len(f.nodes)/10)
	var unavailable []time.Duration
	for i := 0; i < len(f.nodes); i += batch {
		nodes := f.nodes[i:min(len(f.nodes), i+batch)]
		var mu sync.Mutex
		parallel(t, nodes, 64, func(n *simNode) error {
			old := n.live()
			if old == nil {
				return fmt.Errorf("node %s has no agent to roll", n.name)
			}
			stopped := time.Now()
			if err := old.stop(); err != nil {
				return fmt.Errorf("agent of %s: %w", n.name, err)
			}
			// The kubelet starts the new pod once the old one is gone
			// (maxSurge 0); the image is there, the container starts.
			time.Sleep(agentStartDelay)
			r, err := f.startAgent(n, fmt.Sprintf("pod-%d", time.Now().UnixNano()))
			if err != nil {
				return err
			}
			for r.readyAt.Load() == 0 {
				if time.Since(stopped) > 5*time.Minute {
					return fmt.Errorf("the new agent of %s is not Ready after 5 minutes", n.name)
				}
				time.Sleep(100 * time.Millisecond)
			}
			mu.Lock()
			unavailable = append(unavailable, time.Since(stopped))
			mu.Unlock()
			return nil
		})
	}
	rolled := time.Since(start)
	// Let the stream run on a while, then wait until the kubelet side has
	// settled every pod it saw.
	time.Sleep(min(30*time.Second, rolled/2))
	cancel()
	<-streamDone
	f.waitFor(t, "every streamed pod prepared or given up", 3*time.Minute, func() (bool, string) {
		_, _, _, _, pending := f.kubelet.snapshot()
		return pending == 0, fmt.Sprintf("%d pods not prepared yet", pending)
	})
	prepared, stranded, boundOff, wiped, _ := f.kubelet.snapshot()
	var secs []float64
	for _, d := range prepared {
		secs = append(secs, d.Seconds())
	}
	var un []float64
	for _, d := range unavailable {
		un = append(un, d.Seconds())
	}
	f.report.Rollout = rolloutResult{
		Seconds: rolled.Seconds(), BatchSize: batch, PodsPrepared: len(prepared), Stranded: len(stranded),
		StrandedExamples: stranded[:min(len(stranded), 5)], BoundWhileAgentDown: boundOff, SlicesWiped: wiped,
		PrepareDelay: pct(secs), AgentUnavailable: pct(un),
	}
	t.Logf("rollout of %d agents (batches of %d) in %s: %d pods prepared (delay p99 %.1fs), %d bound while their agent was down, %d stranded, %d slice wipes",
		len(f.nodes), batch, rolled.Round(time.Second), len(prepared), pct(secs).P99, boundOff, len(stranded), wiped)
	f.deletePods(t, workNS, "app=stream")
	if len(stranded) > 0 {
		t.Errorf("%d pods stranded by the rollout (goal 0), e.g. %v", len(stranded), stranded[:min(len(stranded), 3)])
	}

}

// agentStartDelay stands for the new agent pod's start: image present,
// container created.
const agentStartDelay = 2 * time.Second

type rolloutResult struct {
	Seconds                        float64
	BatchSize                      int
	PodsPrepared, Stranded         int
	StrandedExamples               []string
	BoundWhileAgentDown            int
	SlicesWiped                    int
	PrepareDelay, AgentUnavailable percentiles
}

// stream creates claim pods on DRA nodes at s.streamRate per second and
// deletes each streamLife after it was created, until ctx ends.
func (f *fleet) stream(ctx context.Context, t *testing.T) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Duration(float64(time.Second) / f.s.streamRate))
		defer tick.Stop()
		type created struct {
			name string
			at   time.Time
		}
		var live []created
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			p := withClaim(basePod(fmt.Sprintf("stream-%06d", i), contract.AllocationDRA), templateOne)
			p.Labels["app"] = "stream"
			if _, err := f.admin.CoreV1().Pods(workNS).Create(ctx, p, metav1.CreateOptions{}); err != nil && ctx.Err() == nil {
				t.Errorf("stream pod: %v", err)
			}
			live = append(live, created{p.Name, time.Now()})
			for len(live) > 0 && time.Since(live[0].at) > streamLife {
				_ = f.admin.CoreV1().Pods(workNS).Delete(ctx, live[0].name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
				live = live[1:]
			}
		}
	}()
	return done
}

const streamLife = 20 * time.Second
