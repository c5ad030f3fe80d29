package counters

import (
	"context"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/internal/promreg"
)

// EventSink sends Kubernetes Events; the binary builds it from its API
// client.
type EventSink interface {
	// PodEvent reports on a pod; uid is empty when the pod could not be
	// read (kubectl describe matches Events by UID when they carry one).
	PodEvent(pod PodInfo, reason, message string)
	NodeEvent(reason, message string)
}

// PodInfo is what the monitor learns of a pod from the API server: the
// PodResources API gives only namespace and name.
type PodInfo struct {
	Namespace, Name, UID string
	Annotations          map[string]string
}

// Pods looks up a pod (its UID for the Event, its opt-out annotation); the
// binary builds it from its API client.
type Pods interface {
	Pod(ctx context.Context, namespace, name string) (PodInfo, error)
}

// Source is what the monitor needs of the agent: the HCAs it manages and
// how its pools and DRA devices map to them.
type Source interface {
	Inventory() inventory.Node
	Attribution() Attribution
}

// MonitorConfig configures a Monitor.
type MonitorConfig struct {
	Reader Reader
	Source Source
	// Lister finds the containers holding devices; nil: no attribution and
	// no idle warning.
	Lister Lister
	Pods   Pods
	Events EventSink
	// Jobs reads the pods of the local pods' jobs for the split-job check;
	// nil: no check.
	Jobs Jobs
	// Period between readings.
	Period time.Duration
	Idle   IdleRule
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Monitor reads the counters on a period and serves the last reading to
// Prometheus.
//
// It reads on its own period rather than on scrape: the idle rule and the
// link-error Events need readings whether or not anyone scrapes, several
// Prometheus replicas scraping must not multiply the sysfs reads, and a
// scrape then costs only formatting. The price is that a series is up to
// one period older than the scrape.
type Monitor struct {
	cfg     MonitorConfig
	log     logr.Logger
	tracker *Tracker
	history History

	heldSince map[string]time.Time
	warned    map[string]bool
	optedOut  map[string]bool
	pods      map[string]PodInfo
	listErr   string
	// overlapsSent are the overlaps already reported, by message.
	overlapsSent map[string]bool
	split        splitWatch

	mu    sync.Mutex
	state snapshot
}

type snapshot struct {
	ports    []PortTotals
	owners   map[string]Holder
	verdicts []IdleVerdict
	overlaps int
	jobs     []jobCount
}

// NewMonitor returns a monitor; Register its collector and Run it.
func NewMonitor(cfg MonitorConfig, log logr.Logger) (*Monitor, error) {
	if err := cfg.Idle.Validate(); err != nil {
		return nil, err
	}
	if cfg.Period <= 0 {
		cfg.Period = 10 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Monitor{
		cfg: cfg, log: log, tracker: NewTracker(), history: History{},
		heldSince: map[string]time.Time{}, warned: map[string]bool{}, optedOut: map[string]bool{}, pods: map[string]PodInfo{},
		overlapsSent: map[string]bool{},
		split:        newSplitWatch(),
	}, nil
}

// Run reads every period until ctx ends.
func (m *Monitor) Run(ctx context.Context) error {
	t := time.NewTicker(m.cfg.Period)
	defer t.Stop()
	for {
		m.Step(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Targets lists the ports of every HCA the agent found.
func Targets(node inventory.Node) []Target {
	var out []Target
	for _, h := range node.HCAs {
		for _, p := range h.Ports {
			out = append(out, Target{HCA: h.Name, Port: p.Number})
		}
	}
	return out
}

// Step takes one reading, judges the holders and sends what is due.
func (m *Monitor) Step(ctx context.Context) {
	now := m.cfg.Now()
	ports := m.cfg.Reader.Read(Targets(m.cfg.Source.Inventory()))
	for _, p := range ports {
		if len(p.Errors) > 0 {
			m.log.V(1).Info("unreadable counters", "hca", p.HCA, "port", p.Port, "errors", p.Errors)
		}
	}
	totals := m.tracker.Observe(ports)

	perHCA := map[string]uint64{}
	for _, p := range totals {
		perHCA[p.HCA] += p.DataBytes()
	}
	m.history.Add(now, perHCA, m.cfg.Idle.Window+2*m.cfg.Period)

	for _, f := range LinkFindings(totals) {
		m.log.Info("link errors rose", "hca", f.HCA, "port", f.Port, "reason", f.Reason, "rose", f.Rose)
		if m.cfg.Events != nil {
			m.cfg.Events.NodeEvent(f.Reason, f.Message)
		}
	}

	var holders []Holder
	if m.cfg.Lister != nil {
		cs, err := m.cfg.Lister.List(ctx)
		switch {
		case err != nil && ctx.Err() == nil && err.Error() != m.listErr:
			// Logged when the error changes, not every period.
			m.log.Error(err, "cannot list pod resources; series carry no pod and the idle rule skips readings until it can")
			m.listErr = err.Error()
		case err == nil:
			if m.listErr != "" {
				m.log.Info("pod resources listed again")
				m.listErr = ""
			}
			holders = Holders(cs, m.cfg.Source.Attribution())
			m.reportOverlaps(Overlaps(holders))
		}
	}
	verdicts := m.judge(ctx, now, holders)
	m.checkSplits(ctx, now, holders)

	m.mu.Lock()
	m.state = snapshot{ports: totals, owners: ExclusiveOwners(holders), verdicts: verdicts, overlaps: m.state.overlaps, jobs: m.split.counts()}
	m.mu.Unlock()
}

// reportOverlaps sends a node Event for each overlap not reported while it
// lasted; one that ends and comes back is reported again.
func (m *Monitor) reportOverlaps(os []Overlap) {
	now := map[string]bool{}
	for _, o := range os {
		msg := o.Message()
		now[msg] = true
		if m.overlapsSent[msg] {
			continue
		}
		m.log.Info("exclusive HCA shared", "hca", o.HCA, "exclusive", o.Exclusive, "sharers", o.Sharers)
		if m.cfg.Events != nil {
			m.cfg.Events.NodeEvent(ReasonExclusiveShared, msg)
		}
	}
	m.overlapsSent = now
	m.mu.Lock()
	m.state.overlaps = len(os)
	m.mu.Unlock()
}

func (m *Monitor) judge(ctx context.Context, now time.Time, holders []Holder) []IdleVerdict {
	m.trackHolders(now, holders)
	verdicts := m.cfg.Idle.Judge(now, holders, m.heldSince, m.history, m.optedOut)
	if m.readIdlePods(ctx, verdicts) {
		verdicts = m.cfg.Idle.Judge(now, holders, m.heldSince, m.history, m.optedOut)
	}
	m.warnIdle(verdicts)
	return verdicts
}

// trackHolders notes when each holder was first seen and forgets what it
// knew of the ones gone.
func (m *Monitor) trackHolders(now time.Time, holders []Holder) {
	present := map[string]bool{}
	for _, h := range holders {
		present[h.ID()] = true
		if _, ok := m.heldSince[h.ID()]; !ok {
			m.heldSince[h.ID()] = now
		}
	}
	for id := range m.heldSince {
		if !present[id] {
			delete(m.heldSince, id)
			delete(m.warned, id)
			delete(m.optedOut, id)
			delete(m.pods, id)
		}
	}
}

// readIdlePods reads the pod (opt-out annotation, UID) only for containers
// the rule finds idle, once per container's life: a Get per holder per
// reading from every node would load the API server for nothing. It says
// whether it read any, so that the verdicts are judged again with the
// opt-outs.
func (m *Monitor) readIdlePods(ctx context.Context, verdicts []IdleVerdict) bool {
	asked := false
	for _, v := range verdicts {
		id := v.Holder.ID()
		if _, known := m.pods[id]; !v.Idle || known || m.cfg.Pods == nil {
			continue
		}
		p, err := m.cfg.Pods.Pod(ctx, v.Holder.Namespace, v.Holder.Pod)
		if err != nil {
			m.log.V(1).Info("cannot read the pod; idle opt-out unknown", "pod", v.Holder.Namespace+"/"+v.Holder.Pod, "error", err.Error())
			continue
		}
		m.pods[id] = p
		m.optedOut[id] = p.Annotations[contract.AnnotationIdleWarning] == "false"
		asked = true
	}
	return asked
}

// warnIdle logs and records an event once for each container found idle,
// and forgets the warning once it is active again.
func (m *Monitor) warnIdle(verdicts []IdleVerdict) {
	for _, v := range verdicts {
		id := v.Holder.ID()
		if !v.Idle {
			if v.Why == "active" {
				delete(m.warned, id)
			}
			continue
		}
		if m.warned[id] {
			continue
		}
		m.warned[id] = true
		m.log.Info("RDMA idle", "pod", v.Holder.Namespace+"/"+v.Holder.Pod, "container", v.Holder.Container, "bytes", v.Moved)
		if m.cfg.Events != nil {
			p, ok := m.pods[id]
			if !ok {
				p = PodInfo{Namespace: v.Holder.Namespace, Name: v.Holder.Pod}
			}
			m.cfg.Events.PodEvent(p, ReasonIdle, v.Why)
		}
	}
}

// Metric names the Monitor exports.
const (
	MetricDataBytes       = "ibkube_rdma_port_data_bytes_total"
	MetricPackets         = "ibkube_rdma_port_packets_total"
	MetricErrors          = "ibkube_rdma_port_errors_total"
	MetricHWStat          = "ibkube_rdma_port_hw_stat_total"
	MetricContainerIdle   = "ibkube_rdma_container_idle"
	MetricIdleContainers  = "ibkube_rdma_idle_containers"
	MetricExclusiveShared = "ibkube_rdma_exclusive_hcas_shared"
)

var (
	// holderLabels are not namespace/pod/container: Prometheus attaches
	// those from the scrape target (the agent's own pod, through the
	// ServiceMonitor) and would rename ours to exported_*; an HCA nobody
	// holds exclusively would even show the agent's pod as its holder under
	// honor_labels.
	holderLabels = []string{"holder_namespace", "holder_pod", "holder_container"}
	descData     = promreg.Desc(MetricDataBytes,
		"Data bytes through an HCA port (sysfs port_xmit_data/port_rcv_data x 4), by direction (xmit, rcv); holder_namespace/holder_pod/holder_container name the holder of an exclusively allocated HCA and are empty otherwise.",
		append([]string{"hca", "port", "direction"}, holderLabels...)...)
	descPackets = promreg.Desc(MetricPackets,
		"Packets through an HCA port (sysfs port_xmit_packets/port_rcv_packets), by direction; holder labels as for the data bytes.",
		append([]string{"hca", "port", "direction"}, holderLabels...)...)
	descErrors = promreg.Desc(MetricErrors,
		"Port error counters (sysfs symbol_error, link_downed, link_error_recovery, port_rcv_errors), by counter.",
		"hca", "port", "counter")
	descHW = promreg.Desc(MetricHWStat,
		"Driver hardware counters (sysfs ports/<n>/hw_counters), by counter.",
		"hca", "port", "counter")
	descIdle = promreg.Desc(MetricContainerIdle,
		"1 when a container holds RDMA devices, has held them longer than the idle window, and its HCAs moved less than the threshold in that window; 0 otherwise.",
		holderLabels...)
	descIdleCount = promreg.Desc(MetricIdleContainers,
		"Containers on this node whose RDMA devices sit idle (see ibkube_rdma_container_idle).")
	descExclusiveShared = promreg.Desc(MetricExclusiveShared,
		"HCAs on this node held exclusively by one container and reachable by others through a shared resource (node Event RDMAExclusiveShared names them).")
)

// Describe implements prometheus.Collector.
func (m *Monitor) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descData, descPackets, descErrors, descHW, descIdle, descIdleCount, descExclusiveShared, descJobPartitions} {
		ch <- d
	}
}

// Collect implements prometheus.Collector from the last reading.
func (m *Monitor) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	st := m.state
	m.mu.Unlock()
	for _, p := range st.ports {
		port := strconv.Itoa(p.Port)
		h := st.owners[p.HCA]
		pair := func(d *prometheus.Desc, xmit, rcv string, scale uint64) {
			if v, ok := p.Counters[xmit]; ok {
				ch <- constMetric(d, prometheus.CounterValue, float64(v*scale), p.HCA, port, "xmit", h.Namespace, h.Pod, h.Container)
			}
			if v, ok := p.Counters[rcv]; ok {
				ch <- constMetric(d, prometheus.CounterValue, float64(v*scale), p.HCA, port, "rcv", h.Namespace, h.Pod, h.Container)
			}
		}
		pair(descData, XmitData, RcvData, DataOctetsPerUnit)
		pair(descPackets, XmitPackets, RcvPackets, 1)
		for _, name := range ErrorCounterNames() {
			if v, ok := p.Counters[name]; ok {
				ch <- constMetric(descErrors, prometheus.CounterValue, float64(v), p.HCA, port, name)
			}
		}
		names := make([]string, 0, len(p.HW))
		for n := range p.HW {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			ch <- constMetric(descHW, prometheus.CounterValue, float64(p.HW[n]), p.HCA, port, n)
		}
	}
	idle := 0
	for _, v := range st.verdicts {
		x := 0.0
		if v.Idle {
			x, idle = 1, idle+1
		}
		ch <- constMetric(descIdle, prometheus.GaugeValue, x, v.Holder.Namespace, v.Holder.Pod, v.Holder.Container)
	}
	ch <- constMetric(descIdleCount, prometheus.GaugeValue, float64(idle))
	ch <- constMetric(descExclusiveShared, prometheus.GaugeValue, float64(st.overlaps))
	for _, j := range st.jobs {
		ch <- constMetric(descJobPartitions, prometheus.GaugeValue, float64(j.partitions), j.namespace, j.job)
	}
}

// Ports returns the last reading's totals (for /counters and the CLI).
func (m *Monitor) Ports() []PortTotals {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]PortTotals(nil), m.state.ports...)
}
