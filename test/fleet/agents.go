//go:build fleet

package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/discovery"
	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/node/agent"
	"github.com/ibkube/ibkube/node/dra"
)

// machine is one simulated machine type: a fixture of a real host and the
// labels its Node carries.
type machine struct {
	fixture, instanceType string
	gpus                  int
}

// machines is the fleet's mix, by weight out of 10: half ND H100 v5, three
// tenths HB (CPU MPI), a fifth OCI BM.GPU.H100.8 (RoCE).
var machines = []struct {
	m      machine
	weight int
}{
	{machine{fixture.NDv5, "Standard_ND96isr_H100_v5", 8}, 5},
	{machine{fixture.HB, "Standard_HB120rs_v3", 0}, 3},
	{machine{fixture.OCIH100, "BM.GPU.H100.8", 8}, 2},
}

func machineFor(i int) machine {
	k := i % 10
	for _, w := range machines {
		if k < w.weight {
			return w.m
		}
		k -= w.weight
	}
	return machines[0].m
}

// Node labels the harness sets: which allocation the node's agent uses.
const (
	labelMode     = "ibkube.io/fleet-allocation"
	labelInstance = "node.kubernetes.io/instance-type"
)

// simNode is one simulated node: its Node, its fixture tree (the host its
// agent scans) and the agent instance serving it now.
type simNode struct {
	name    string
	index   int
	machine machine
	mode    string // contract.AllocationDRA or contract.AllocationDevicePlugin
	dir     string // fixture tree
	sockets string // the kubelet plugin directories (DRA)

	mu      sync.Mutex
	current *agentRun
	// downSince is when the last agent stopped with none after it.
	downSince time.Time
}

func (n *simNode) live() *agentRun {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.current
}

// agentRun is one agent process's worth of state: what the DaemonSet's
// pod would run on the node.
type agentRun struct {
	node    *simNode
	agent   *agent.Agent
	driver  *dra.Driver // nil in device-plugin mode
	client  kubernetes.Interface
	counter *requestCounter
	cancel  context.CancelFunc
	done    chan error
	started time.Time
	readyAt atomic.Int64 // unix nanos, 0 until Ready
	// devicesAtReady: the devices the API held for the node when the
	// agent became Ready (DRA), -1 until then, -2 if the API could not be
	// asked.
	devicesAtReady atomic.Int64
	// restarts: how often the agent exited at start and was started
	// again (restartOnFailure).
	restarts int
}

// requestCounter counts an agent's API requests by verb and resource, as
// the API server's apiserver_request_total would per client.
type requestCounter struct {
	total, writes, sliceWrites, nodeWrites atomic.Int64
}

type countingTransport struct {
	next http.RoundTripper
	c    *requestCounter
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.c.total.Add(1)
	if r.Method != http.MethodGet {
		t.c.writes.Add(1)
		switch {
		case strings.Contains(r.URL.Path, "/resourceslices"):
			if r.URL.Query().Get("dryRun") == "" {
				t.c.sliceWrites.Add(1)
			}
		case strings.Contains(r.URL.Path, "/nodes/"):
			t.c.nodeWrites.Add(1)
		}
	}
	return t.next.RoundTrip(r)
}

// agentClient is the client an agent pod builds (rest.InClusterConfig:
// client-go's defaults, 5 QPS and burst 10) with its own connection: a
// dialer of its own keeps client-go from sharing one transport between
// agents, as separate processes never do.
func agentClient(base *rest.Config, c *requestCounter) (kubernetes.Interface, error) {
	cfg := rest.CopyConfig(base)
	cfg.QPS, cfg.Burst = 5, 10
	cfg.UserAgent = "ibkube-node-agent/fleet"
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	cfg.Dial = d.DialContext
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return countingTransport{next: rt, c: c} }
	return kubernetes.NewForConfig(cfg)
}

// noHints is discovery without its change hints: the agent then relies on
// its periodic rescan (10 s). Each hint source takes an inotify instance,
// and this host allows 128 per user, far fewer than the fleet's agents.
type noHints struct{ *discovery.Scanner }

func (noHints) Watch(context.Context) (<-chan struct{}, error) { return nil, nil }

// nodeLabels is the agent's NodeLabels through its own client.
type nodeLabels struct{ cs kubernetes.Interface }

func (l nodeLabels) NodeLabels(ctx context.Context, name string) (map[string]string, error) {
	n, err := l.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get node %s: %w", name, err)
	}
	return n.Labels, nil
}

// PatchNodeLabels is the agent's partition label write through its own
// client, as cmd/ibkube-node-agent does it: a JSON merge patch of the
// labels alone.
func (l nodeLabels) PatchNodeLabels(ctx context.Context, node string, set map[string]*string) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": set}})
	if err != nil {
		return err
	}
	if _, err := l.cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, body, metav1.PatchOptions{FieldManager: "ibkube-node-agent"}); err != nil {
		return fmt.Errorf("label node %s: %w", node, err)
	}
	return nil
}

// maxAgentRestarts is how often an agent whose start fails is started
// again before the run gives up on it: with the kubelet's back-off, 10 s
// doubling, the fourth restart comes 150 s after the first failure.
const maxAgentRestarts = 4

// restartOnFailure runs start as the kubelet runs a container that exits
// with an error at start (the agent exits when its gate check fails):
// again after backoff, doubling each time (the kubelet's container
// restart back-off: 10 s, doubling, at most 5 min, which 4 restarts never
// reach), up to maxRestarts times. An API server too slow to answer one
// agent's dry-run at start (a TLS handshake timeout with 1,000 agents
// starting at once on 2 busy cores) then delays that agent's Ready, as on
// a real node, instead of ending the run. It returns the restarts and
// start's last error.
func restartOnFailure(ctx context.Context, backoff time.Duration, maxRestarts int, start func() error) (int, error) {
	for restarts := 0; ; restarts++ {
		err := start()
		if err == nil || restarts == maxRestarts {
			return restarts, err
		}
		select {
		case <-ctx.Done():
			return restarts, errors.Join(err, context.Cause(ctx))
		case <-time.After(backoff):
		}
		backoff *= 2
	}
}

// startAgent starts an agent for n as its DaemonSet pod would: its own
// client, the gate check and the DRA driver in DRA mode, the device plugin
// side (simulated kubelet included) otherwise.
func (f *fleet) startAgent(n *simNode, podUID string) (*agentRun, error) {
	r := &agentRun{node: n, counter: &requestCounter{}, done: make(chan error, 1), started: time.Now()}
	r.devicesAtReady.Store(-1)
	cs, err := agentClient(f.rest, r.counter)
	if err != nil {
		return nil, err
	}
	r.client = cs
	log := logr.Discard()
	if f.verbose {
		log = f.log.WithValues("node", n.name)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	r.cancel = cancel
	scanner := noHints{discovery.NewScanner(discovery.Options{SysfsRoot: fixture.SysfsRoot(n.dir), DevRoot: fixture.DevRoot(n.dir), PortPoll: -1, Logger: log})}
	acfg := agent.Config{
		Agent: f.agentConfig, Scanner: scanner, SysfsRoot: fixture.SysfsRoot(n.dir),
		StateDir: filepath.Join(n.dir, "state"), NodeName: n.name, Nodes: nodeLabels{cs}, Labels: nodeLabels{cs},
	}
	if n.mode == contract.AllocationDRA {
		restarts, err := restartOnFailure(ctx, f.agentRestartBackoff, maxAgentRestarts, func() error {
			return dra.CheckGates(ctx, cs.ResourceV1().DeviceClasses(), cs.ResourceV1().ResourceSlices(), n.name, true)
		})
		r.restarts = restarts
		if err != nil {
			cancel()
			return nil, fmt.Errorf("node %s, after %d restarts: %w", n.name, restarts, err)
		}
		d, err := dra.New(dra.Config{
			NodeName: n.name, CDIDir: filepath.Join(n.dir, "cdi"),
			Plugin: dra.PluginOptions{Client: cs, PodUID: podUID, PluginDir: filepath.Join(n.sockets, "p"), RegistryDir: filepath.Join(n.sockets, "r")},
		}, log)
		if err != nil {
			cancel()
			return nil, err
		}
		r.driver = d
		acfg.Server = d
	} else {
		acfg.Server = &kubeletCapacity{node: n.name, cs: cs, period: f.kubeletStatusPeriod, log: log}
	}
	a, err := agent.New(acfg, log)
	if err != nil {
		cancel()
		return nil, err
	}
	r.agent = a
	go func() { r.done <- a.Run(ctx) }()
	// Ready is noted within 50 ms (the agent's /readyz, read in process).
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for !a.Ready() {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		r.readyAt.Store(time.Now().UnixNano())
		if r.driver != nil {
			// What the scheduler sees the moment the agent says Ready.
			sel := fields.Set{resourceapi.ResourceSliceSelectorNodeName: n.name, resourceapi.ResourceSliceSelectorDriver: contract.DRADriverName}
			// A failed list says nothing about the slices: it is retried,
			// and one that keeps failing is recorded as unknown (-2), not
			// as a node without devices.
			devices := int64(-2)
			for try := 0; try < 5 && ctx.Err() == nil; try++ {
				list, err := f.admin.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: sel.String()})
				if err != nil {
					time.Sleep(200 * time.Millisecond)
					continue
				}
				devices = 0
				for _, s := range list.Items {
					devices += int64(len(s.Spec.Devices))
				}
				break
			}
			r.devicesAtReady.Store(devices)
		}
	}()
	n.mu.Lock()
	n.current = r
	n.downSince = time.Time{}
	n.mu.Unlock()
	return r, nil
}

// stop ends the agent as SIGTERM would and waits for it to exit.
func (r *agentRun) stop() error {
	r.cancel()
	err := <-r.done
	n := r.node
	n.mu.Lock()
	if n.current == r {
		n.current = nil
		n.downSince = time.Now()
	}
	n.mu.Unlock()
	return err
}

// buildFixture builds a node's fixture tree (a copy per node, since ports
// flap per node) and gives its InfiniBand ports the tenant key of the node's
// scale set (partitionKey) besides the default partition, as Azure does
// ("Discover partition keys": each VM's ports hold the default key and the
// one key of its scale set or availability set).
func buildFixture(n *simNode, nodes int) error {
	if err := os.RemoveAll(n.dir); err != nil {
		return err
	}
	if err := fixture.Build(n.dir, n.machine.fixture); err != nil {
		return fmt.Errorf("fixture %s for %s: %w", n.machine.fixture, n.name, err)
	}
	ps, err := ports(n)
	if err != nil {
		return err
	}
	for _, p := range ps {
		if p.port.LinkLayer != inventory.LinkLayerInfiniBand {
			continue
		}
		if err := fixture.SetPKeys(n.dir, p.hca.Name, p.port.Number, partitionKey(n.index, nodes), "0x7fff"); err != nil {
			return fmt.Errorf("partition key of %s: %w", n.name, err)
		}
	}
	return os.MkdirAll(filepath.Join(n.dir, "state"), 0o755)
}

// partitionKey is the tenant key of node i's scale set: the fleet is ten
// scale sets of consecutive nodes (at least ten nodes each), each of the
// machine mix.
func partitionKey(i, nodes int) string {
	return fmt.Sprintf("0x%04x", 0x8001+i/partitionSize(nodes))
}

func partitionSize(nodes int) int { return max(10, nodes/10) }

// ports lists the node's HCA ports (device, port number) as its fixture
// has them.
func ports(n *simNode) ([]portRef, error) {
	s := discovery.NewScanner(discovery.Options{SysfsRoot: fixture.SysfsRoot(n.dir), DevRoot: fixture.DevRoot(n.dir), PortPoll: -1})
	inv, err := s.Scan(context.Background())
	if err != nil {
		return nil, err
	}
	var out []portRef
	for _, h := range inv.HCAs {
		for _, p := range h.Ports {
			out = append(out, portRef{node: n, hca: h, port: p})
		}
	}
	return out, nil
}

type portRef struct {
	node *simNode
	hca  inventory.HCA
	port inventory.Port
}

// nodeObject is the Node KWOK takes over (its annotation), with the labels
// a real node of the machine type carries and its GPUs as capacity (no GPU
// device plugin runs; the e2e cluster patches them the same way).
func nodeObject(n *simNode) *corev1.Node {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    mustQuantity("96"),
		corev1.ResourceMemory: mustQuantity("1800Gi"),
		corev1.ResourcePods:   mustQuantity("110"),
	}
	if n.machine.gpus > 0 {
		capacity["nvidia.com/gpu"] = mustQuantity(fmt.Sprint(n.machine.gpus))
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        n.name,
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
			Labels: map[string]string{
				"kubernetes.io/hostname": n.name, "kubernetes.io/os": "linux", "type": "kwok",
				labelInstance: n.machine.instanceType, labelMode: n.mode,
				"feature.node.kubernetes.io/pci-15b3.present": "true",
			},
		},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity.DeepCopy()},
	}
}
