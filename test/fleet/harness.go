//go:build fleet

// Package fleet runs a simulated fleet of GPU nodes against the real control
// plane that test/fleet/fleet.sh brings up: KWOK's nodes, an ibkube agent's
// API side for each (the real agent, resource model and DRA driver, many per
// process, each with its own client), the kubelet's side simulated, and the
// workloads and faults of docs/fleet.md. make fleet runs it at 1,000 nodes;
// make fleet-smoke at 20 with the same phases, shortened, and checks the
// goals.
package fleet

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/node/config"
)

// The agents' config, by FLEET_POOLS (settings.pools).
var (
	//go:embed testdata/agent-config.yaml
	agentConfigYAML []byte
	//go:embed testdata/agent-config-split.yaml
	agentConfigSplitYAML []byte
)

// settings are the run's knobs, from the environment (hack/make/fleet.mk).
type settings struct {
	kubeconfig, dir, script, report, helm, ibkube string
	nodes                                         int
	smoke                                         bool
	// startupOnly: nodes, agents, steady state and storage only
	// (FLEET_PHASES=startup), for fleets too large for the rest here.
	startupOnly bool
	// admissionOnly: the admission phase alone, without nodes or agents
	// (FLEET_PHASES=admission): webhook against policy mode, in minutes.
	admissionOnly bool
	// draOnly: nodes, agents, the throughput bursts and the fair DRA phase
	// (FLEET_PHASES=dra); draFair: the fair DRA phase runs (every full
	// run but the smoke's, whose fleet is too small to compare).
	draOnly, draFair bool
	// pools: the agents' pools, FLEET_POOLS: "default" (agent-config.yaml,
	// every InfiniBand HCA shared and exclusive) or "split"
	// (agent-config-split.yaml: mlx5_7 shared, the rest exclusive).
	pools string
	// profile: a CPU profile of the API server during each admission
	// burst, written beside the report (FLEET_PROFILE=1; fleet.sh then
	// serves the API server's /debug/pprof).
	profile bool
	// phase lengths
	steady, flap, flapPeriod, webhookStream time.Duration
	pods                                    int // pods per throughput workload
	leaseSeconds                            int // the nodes' Lease duration, as fleet.sh gave KWOK
	streamRate                              float64
}

func loadSettings(t *testing.T) settings {
	get := func(k, def string) string {
		if v := os.Getenv(k); v != "" {
			return v
		}
		return def
	}
	s := settings{
		kubeconfig: get("FLEET_KUBECONFIG", ""), dir: get("FLEET_DIR", ""), script: get("FLEET_SCRIPT", ""),
		report: get("FLEET_REPORT", ""), helm: get("HELM", ""), ibkube: get("IBKUBE", ""),
		smoke: get("FLEET_SMOKE", "") != "", profile: get("FLEET_PROFILE", "") != "",
	}
	if s.kubeconfig == "" || s.dir == "" || s.script == "" || s.report == "" {
		t.Fatal("FLEET_KUBECONFIG, FLEET_DIR, FLEET_SCRIPT and FLEET_REPORT must be set: run make fleet or make fleet-smoke")
	}
	n, err := strconv.Atoi(get("FLEET_NODES", "1000"))
	if err != nil || n < 10 {
		t.Fatalf("FLEET_NODES=%q: want a whole number of nodes, 10 or more", os.Getenv("FLEET_NODES"))
	}
	s.nodes = n
	if s.smoke {
		s.steady, s.flap, s.flapPeriod, s.webhookStream = 15*time.Second, 20*time.Second, 10*time.Second, 35*time.Second
		s.pods, s.streamRate = 20, 1
	} else {
		s.steady, s.flap, s.flapPeriod, s.webhookStream = 2*time.Minute, 10*time.Minute, time.Minute, 2*time.Minute
		s.pods, s.streamRate = n, 10
	}
	switch v := get("FLEET_PHASES", "all"); v {
	case "all":
		s.draFair = !s.smoke
	case "startup":
		s.startupOnly = true
	case "admission":
		s.admissionOnly = true
	case "dra":
		s.draOnly, s.draFair = true, true
	default:
		t.Fatalf("FLEET_PHASES=%q: want all (the default), startup (nodes, agents, steady state, storage), admission (the admission phase alone) or dra (the throughput bursts and the fair DRA phase: reference driver, GPU slices, sharers)", v)
	}
	switch s.pools = get("FLEET_POOLS", "default"); s.pools {
	case "default", "split":
	default:
		t.Fatalf("FLEET_POOLS=%q: want default (every InfiniBand HCA in the shared and the exclusive pool, with counters) or split (mlx5_7 shared, the rest exclusive, no counters)", s.pools)
	}
	if v := os.Getenv("FLEET_FLAP"); v != "" {
		if s.flap, err = time.ParseDuration(v); err != nil {
			t.Fatalf("FLEET_FLAP=%q: want a duration such as 10m", v)
		}
	}
	if s.leaseSeconds, err = strconv.Atoi(get("FLEET_LEASE_SECONDS", "40")); err != nil {
		t.Fatalf("FLEET_LEASE_SECONDS=%q: want a whole number of seconds", os.Getenv("FLEET_LEASE_SECONDS"))
	}
	if s.admissionOnly {
		// Bursts the size of the 1,000-node run's, on a fleet of none.
		s.pods = 1000
	}
	if v := os.Getenv("FLEET_PODS"); v != "" {
		if s.pods, err = strconv.Atoi(v); err != nil {
			t.Fatalf("FLEET_PODS=%q: want a whole number", v)
		}
	}
	return s
}

// fleet is the simulated fleet and its clients.
type fleet struct {
	s           settings
	ctx         context.Context
	log         logr.Logger
	verbose     bool
	rest        *rest.Config
	admin       kubernetes.Interface
	agentConfig *config.AgentConfig
	nodes       []*simNode
	byName      map[string]*simNode
	kubelet     *draKubelet
	// kubeletStatusPeriod is the kubelet's nodeStatusUpdateFrequency.
	kubeletStatusPeriod time.Duration
	// agentRestartBackoff is the kubelet's first delay before it starts a
	// container that exited again (restartOnFailure).
	agentRestartBackoff time.Duration
	report              *report
}

const workNS = "fleet"

// setup: the workload namespace (opted in), the chart's DeviceClasses and
// the claim templates of the DRA workloads.
func (f *fleet) setup(t *testing.T) {
	ctx := f.ctx
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: workNS}},
		{ObjectMeta: metav1.ObjectMeta{Name: admitNS, Labels: map[string]string{contract.LabelInject: contract.InjectEnabled}}},
		{ObjectMeta: metav1.ObjectMeta{Name: baselineNS}},
		{ObjectMeta: metav1.ObjectMeta{Name: floorNS}},
		{ObjectMeta: metav1.ObjectMeta{Name: "ibkube-system"}},
	} {
		if _, err := f.admin.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !isExists(err) {
			t.Fatal(err)
		}
	}
	for _, c := range deviceClasses() {
		if _, err := f.admin.ResourceV1().DeviceClasses().Create(ctx, c, metav1.CreateOptions{}); err != nil && !isExists(err) {
			t.Fatal(err)
		}
	}
	for _, c := range claimTemplates() {
		if _, err := f.admin.ResourceV1().ResourceClaimTemplates(workNS).Create(ctx, c, metav1.CreateOptions{}); err != nil && !isExists(err) {
			t.Fatal(err)
		}
	}
}

// createNodes makes N Nodes for KWOK, half of each machine type in DRA
// mode and half in device-plugin mode, with their fixture trees, and waits
// until KWOK reports every one Ready.
func (f *fleet) createNodes(t *testing.T) {
	start := time.Now()
	for i := 0; i < f.s.nodes; i++ {
		mode := contract.AllocationDRA
		if (i/10)%2 == 1 {
			mode = contract.AllocationDevicePlugin
		}
		n := &simNode{
			name: fmt.Sprintf("fleet-%05d", i), index: i, machine: machineFor(i), mode: mode,
			dir: filepath.Join(f.s.dir, "nodes", strconv.Itoa(i)), sockets: filepath.Join("/run/ibkf", strconv.Itoa(i)),
		}
		f.nodes = append(f.nodes, n)
		f.byName[n.name] = n
	}
	parallel(t, f.nodes, 16, func(n *simNode) error {
		if err := buildFixture(n, f.s.nodes); err != nil {
			return err
		}
		if err := os.MkdirAll(n.sockets, 0o750); err != nil {
			return err
		}
		_, err := f.admin.CoreV1().Nodes().Create(f.ctx, nodeObject(n), metav1.CreateOptions{})
		if isExists(err) {
			return nil
		}
		return err
	})
	f.waitFor(t, "every node Ready (KWOK)", 10*time.Minute, func() (bool, string) {
		list, err := f.admin.CoreV1().Nodes().List(f.ctx, metav1.ListOptions{LabelSelector: "type=kwok"})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, n := range list.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready == f.s.nodes, fmt.Sprintf("%d of %d Ready", ready, f.s.nodes)
	})
	f.report.NodesReadySeconds = time.Since(start).Seconds()
	t.Logf("%d nodes created and Ready in %s", f.s.nodes, time.Since(start).Round(time.Second))
}

// startAgents starts every agent at once, as a DaemonSet created on a
// running fleet does, and measures how long until each is Ready and its
// devices are visible in the API (slices, or capacity).
func (f *fleet) startAgents(t *testing.T) {
	start := time.Now()
	seen := f.watchPublished(start)
	var mu sync.Mutex
	runs := map[string]*agentRun{}
	parallel(t, f.nodes, 64, func(n *simNode) error {
		r, err := f.startAgent(n, "pod-0")
		if err != nil {
			return err
		}
		mu.Lock()
		runs[n.name] = r
		mu.Unlock()
		return nil
	})
	f.waitFor(t, "every agent Ready and its devices published", 15*time.Minute, func() (bool, string) {
		ready := 0
		for _, r := range runs {
			if r.readyAt.Load() != 0 && (r.driver == nil || r.devicesAtReady.Load() != -1) {
				ready++
			}
		}
		pub := seen.count()
		if ready == len(f.nodes) && pub < len(f.nodes) {
			f.publishedFromList(seen)
			pub = seen.count()
		}
		return ready == len(f.nodes) && pub == len(f.nodes), fmt.Sprintf("%d Ready, %d published of %d", ready, pub, len(f.nodes))
	})
	seen.stop()
	var readyDRA, readyDP, pubDRA, pubDP []float64
	for _, n := range f.nodes {
		r := runs[n.name]
		rd := time.Duration(r.readyAt.Load() - start.UnixNano()).Seconds()
		pd := seen.at(n.name).Sub(start).Seconds()
		if n.mode == contract.AllocationDRA {
			readyDRA, pubDRA = append(readyDRA, rd), append(pubDRA, pd)
			// Ready must never come before the API holds the slices.
			switch d := r.devicesAtReady.Load(); {
			case d == -2:
				f.report.ReadyCheckFailed++
			case d <= 0:
				f.report.ReadyBeforePublished++
			}
		} else {
			readyDP, pubDP = append(readyDP, rd), append(pubDP, pd)
		}
	}
	f.report.Startup = map[string]percentiles{
		"dra_published": pct(pubDRA), "dra_ready": pct(readyDRA),
		"deviceplugin_capacity": pct(pubDP), "deviceplugin_ready": pct(readyDP),
	}
	var reqs int64
	for _, r := range runs {
		reqs += r.counter.total.Load()
		f.report.AgentRestarts += r.restarts
	}
	f.report.StartupRequestsPerNode = float64(reqs) / float64(len(f.nodes))
	seen.mu.Lock()
	f.report.PublishedFromList, f.report.PublishedLate = seen.fromList, seen.late
	seen.mu.Unlock()
	t.Logf("agents: all Ready and published in %s; DRA slices p50 %.1fs p99 %.1fs; capacity p50 %.1fs p99 %.1fs",
		time.Since(start).Round(time.Second), pct(pubDRA).P50, pct(pubDRA).P99, pct(pubDP).P50, pct(pubDP).P99)
	if f.report.ReadyBeforePublished > 0 {
		t.Errorf("%d DRA agents were Ready while the API held no device of their node", f.report.ReadyBeforePublished)
	}
}

func (f *fleet) stopAgents(t *testing.T) {
	parallel(t, f.nodes, 64, func(n *simNode) error {
		if r := n.live(); r != nil {
			return r.stop()
		}
		return nil
	})
}

// measureSteady: the agents' API request rate with nothing happening.
func (f *fleet) measureSteady(t *testing.T) {
	rate, _ := f.requestRate(f.s.steady)
	f.report.SteadyRequestsPerNodePerSecond = rate
	t.Logf("steady state: %.4f requests/s per node (goal <= 0.05)", rate)
	if rate > 0.05 {
		t.Errorf("agents at steady state send %.4f requests/s per node; goal <= 0.05", rate)
	}
}

// requestRate counts every live agent's requests over d: per node per
// second, and the most writes any one node made to its slices or Node.
func (f *fleet) requestRate(d time.Duration) (float64, int64) {
	before := map[*agentRun][2]int64{}
	for _, n := range f.nodes {
		if r := n.live(); r != nil {
			before[r] = [2]int64{r.counter.total.Load(), r.counter.sliceWrites.Load() + r.counter.nodeWrites.Load()}
		}
	}
	select {
	case <-f.ctx.Done():
	case <-time.After(d):
	}
	var total, maxWrites int64
	for r, b := range before {
		total += r.counter.total.Load() - b[0]
		maxWrites = max(maxWrites, r.counter.sliceWrites.Load()+r.counter.nodeWrites.Load()-b[1])
	}
	return float64(total) / d.Seconds() / float64(len(f.nodes)), maxWrites
}

func (f *fleet) waitFor(t *testing.T, what string, within time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	last := ""
	for {
		ok, state := cond()
		if ok {
			return
		}
		if state != last {
			t.Logf("waiting for %s: %s", what, state)
			last = state
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %s", within, what, state)
		}
		time.Sleep(time.Second)
	}
}

// rewatch hands every event of the watch open opens to handle until ctx
// ends, opening it again whenever it closes (the API server ends watches at
// its timeout and closes those whose client falls behind) or fails to open
// (retried each second). A reopened watch replays the current objects as
// Added, so handle must take an object twice.
func rewatch(ctx context.Context, open func(context.Context) (watch.Interface, error), handle func(watch.Event)) {
	for ctx.Err() == nil {
		w, err := open(ctx)
		if err != nil {
			time.Sleep(time.Second)
			continue
		}
		for ev := range w.ResultChan() {
			handle(ev)
		}
		w.Stop()
	}
}

// parallel runs fn for every node, width at a time, and fails the test on
// the first error.
func parallel(t *testing.T, nodes []*simNode, width int, fn func(*simNode) error) {
	t.Helper()
	errs := make(chan error, len(nodes))
	forEach(len(nodes), width, func(i int) {
		if err := fn(nodes[i]); err != nil {
			errs <- err
		}
	})
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// forEach runs fn(i) for every i below n, width at a time, and returns once
// every call has.
func forEach(n, width int, fn func(i int)) {
	sem := make(chan struct{}, width)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			fn(i)
		}()
	}
	wg.Wait()
}

type percentiles struct {
	P50, P99, Max float64
	N             int
}

func pct(v []float64) percentiles {
	if len(v) == 0 {
		return percentiles{}
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	at := func(q float64) float64 { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return percentiles{P50: at(0.5), P99: at(0.99), Max: s[len(s)-1], N: len(s)}
}

func mustQuantity(s string) apiresource.Quantity { return apiresource.MustParse(s) }

func (f *fleet) writeReport(t *testing.T) {
	b, err := json.MarshalIndent(f.report, "", "  ")
	if err != nil {
		t.Error(err)
		return
	}
	if err := os.WriteFile(f.s.report, append(b, '\n'), 0o644); err != nil {
		t.Error(err)
	}
}
