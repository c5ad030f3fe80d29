package main

import (
	"fmt"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/node/agent"
	"github.com/ibkube/ibkube/node/counters"
)

// addCounterMonitor runs the counters monitor beside the agent and exports
// it on the agent's /metrics (see docs/observability.md).
// cluster is nil outside a cluster: findings are then only logged.
func addCounterMonitor(a *agent.Agent, opts options, cluster *api, log logr.Logger) (stop func(), err error) {
	log = log.WithName("counters")
	if !opts.observe.counters {
		log.Info("port counters off (--counters=false): no RDMA traffic series, idle warning or link-error Events")
		return func() {}, nil
	}
	cfg := counters.MonitorConfig{
		Reader: counters.Reader{SysfsRoot: opts.sysfsRoot},
		Source: agentSource{a},
		Period: opts.observe.period,
		Idle:   counters.IdleRule{Window: opts.observe.idleWindow, MinBytes: opts.observe.idleMinBytes},
	}
	var stops []func()
	stop = func() {
		for _, s := range stops {
			s()
		}
	}
	if sock := opts.observe.podResourcesSocket; sock != "" {
		l, err := counters.NewPodResourcesLister(sock)
		if err != nil {
			return nil, err
		}
		stops = append(stops, func() { _ = l.Close() })
		cfg.Lister = l
	}
	if cluster != nil {
		cfg.Events = recorderSink{rec: cluster.recorder, node: opts.nodeName}
		cfg.Pods = cluster
		cfg.Jobs = cluster
	}
	m, err := counters.NewMonitor(cfg, log)
	if err != nil {
		stop()
		return nil, err
	}
	if err := a.Registry().Register(m); err != nil {
		stop()
		return nil, fmt.Errorf("register counter metrics: %w", err)
	}
	a.Add(m.Run)
	return stop, nil
}

// agentSource is the agent as the monitor reads it.
type agentSource struct{ a *agent.Agent }

func (s agentSource) Inventory() inventory.Node { return s.a.Inventory() }

func (s agentSource) Pools() map[string]counters.PoolView {
	out := map[string]counters.PoolView{}
	for _, p := range s.a.Model().Pools {
		v := counters.PoolView{Exclusive: p.Exclusive()}
		for _, h := range p.HCAs {
			v.HCAs = append(v.HCAs, h.Name)
		}
		out[p.Resource] = v
	}
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
