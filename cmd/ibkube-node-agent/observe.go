package main

import (
	"fmt"
	"path/filepath"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/node/agent"
	"github.com/ibkube/ibkube/node/counters"
	"github.com/ibkube/ibkube/node/deviceplugin"
	"github.com/ibkube/ibkube/node/dra"
)

// newPodResources connects to the kubelet's PodResources API, which the
// counters monitor and the shared-slot guard read; nil when
// --pod-resources-socket is empty.
func newPodResources(opts options) (*counters.PodResourcesLister, error) {
	if opts.observe.podResourcesSocket == "" {
		return nil, nil
	}
	return counters.NewPodResourcesLister(opts.observe.podResourcesSocket)
}

// addSharedGuard makes the device plugin's shared slots leave out HCAs
// containers hold exclusively (read from the kubelet's PodResources API),
// and records what each slot got in the state directory, where the
// counters monitor's overlap report and ibkube doctor read it.
func addSharedGuard(a *agent.Agent, podres *counters.PodResourcesLister, src agentSource, log logr.Logger) {
	grants := &deviceplugin.GrantsFile{Path: src.grantsPath}
	if podres == nil {
		log.Info("no PodResources socket (--pod-resources-socket empty): shared slots get every healthy HCA, including HCAs held exclusively")
		a.GuardShared(nil, grants)
		return
	}
	a.GuardShared(counters.ExclusiveHolds{Lister: podres, Attribution: src.Attribution}, grants)
}

// addCounterMonitor runs the counters monitor beside the agent and exports
// it on the agent's /metrics (see docs/observability.md).
// cluster is nil outside a cluster: findings are then only logged.
func addCounterMonitor(a *agent.Agent, opts options, cluster *api, podres *counters.PodResourcesLister, src agentSource, log logr.Logger) error {
	log = log.WithName("counters")
	if !opts.observe.counters {
		log.Info("port counters off (--counters=false): no RDMA traffic series, idle warning, link-error or exclusive-overlap Events")
		return nil
	}
	cfg := counters.MonitorConfig{
		Reader: counters.Reader{SysfsRoot: opts.sysfsRoot},
		Source: src,
		Period: opts.observe.period,
		Idle:   counters.IdleRule{Window: opts.observe.idleWindow, MinBytes: opts.observe.idleMinBytes},
	}
	if podres != nil {
		cfg.Lister = podres
	}
	if cluster != nil {
		cfg.Events = recorderSink{rec: cluster.recorder, node: opts.nodeName}
		cfg.Pods = cluster
		if opts.observe.splitJobs {
			cfg.Jobs = cluster
		} else {
			log.Info("split-job check off (--split-jobs=false): the agent reads only the pods its kubelet names, no RDMAJobSplit Event or ibkube_rdma_job_partitions")
		}
	}
	m, err := counters.NewMonitor(cfg, log)
	if err != nil {
		return err
	}
	if err := a.Registry().Register(m); err != nil {
		return fmt.Errorf("register counter metrics: %w", err)
	}
	a.Add(m.Run)
	return nil
}

// agentSource is the agent as the monitor reads it.
type agentSource struct {
	a *agent.Agent
	// grantsPath is the device plugin's record of shared slots' HCAs.
	grantsPath string
	// draPool is the node's ResourceSlice pool when the agent runs the DRA
	// driver, else "".
	draPool string
	log     logr.Logger
}

func newAgentSource(a *agent.Agent, opts options, log logr.Logger) agentSource {
	s := agentSource{a: a, grantsPath: filepath.Join(opts.stateDir, deviceplugin.GrantsFileName), log: log}
	if opts.dra.allocation == contract.AllocationDRA {
		s.draPool = opts.nodeName
	}
	return s
}

func (s agentSource) Inventory() inventory.Node { return s.a.Inventory() }

func (s agentSource) Attribution() counters.Attribution {
	model := s.a.Model()
	out := counters.Attribution{Pools: map[string]counters.PoolView{}}
	if s.draPool != "" {
		out.DRA = map[string]counters.DRADevice{}
		for _, d := range dra.Devices(model) {
			out.DRA[counters.DRAKey(contract.DRADriverName, s.draPool, d.Name)] = counters.DRADevice{HCA: d.HCA.Name, Exclusive: d.Pool.Exclusive()}
		}
		return out
	}
	grants, err := deviceplugin.LoadGrants(s.grantsPath)
	if err != nil {
		s.log.V(1).Info("shared slots' HCAs unknown; each is taken to reach every HCA", "error", err.Error())
	}
	out.Pools = counters.PoolViews(model, grants)
	return out
}

// recorderSink sends the monitor's findings as Events through client-go's
// recorder (which aggregates repeats).
type recorderSink struct {
	rec  record.EventRecorder
	node string
}

func (s recorderSink) PodEvent(pod counters.PodInfo, reason, message string) {
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: types.UID(pod.UID)}
	s.rec.Event(ref, corev1.EventTypeWarning, reason, message)
}

func (s recorderSink) NodeEvent(reason, message string) {
	// A Node's Events carry its name as UID, as the kubelet's do
	// (kubernetes pkg/kubelet/kubelet.go nodeRef).
	ref := &corev1.ObjectReference{Kind: "Node", Name: s.node, UID: types.UID(s.node)}
	s.rec.Event(ref, corev1.EventTypeWarning, reason, message)
}
