package agent

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ibkube/ibkube/internal/promreg"
	"github.com/ibkube/ibkube/node/resource"
)

// metrics are the agent's Prometheus series (namespace ibkube_node_agent).
type metrics struct {
	devices       *prometheus.GaugeVec
	hcas          *prometheus.GaugeVec
	allocations   *prometheus.CounterVec
	allocated     *prometheus.CounterVec
	registrations *prometheus.CounterVec
	scans         *prometheus.CounterVec
	scanSeconds   prometheus.Histogram
	partition     *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		devices:       promreg.GaugeVec("ibkube_node_agent_devices", "Devices advertised to the kubelet, by resource and health (Healthy, Unhealthy).", "resource", "health"),
		hcas:          promreg.GaugeVec("ibkube_node_agent_hca_healthy", "1 when the HCA is healthy, 0 when not; resource is the comma-separated resources it feeds, empty when excluded.", "hca", "resource"),
		allocations:   promreg.CounterVec("ibkube_node_agent_allocations_total", "Container allocations answered, by resource.", "resource"),
		allocated:     promreg.CounterVec("ibkube_node_agent_allocated_devices_total", "Devices handed out in allocations, by resource.", "resource"),
		registrations: promreg.CounterVec("ibkube_node_agent_kubelet_registrations_total", "Registrations with the kubelet, by resource and result (success, error); more than one success means re-registrations after kubelet restarts.", "resource", "result"),
		scans:         promreg.CounterVec("ibkube_node_agent_scans_total", "Hardware scans, by trigger (start, event, periodic) and result (success, error).", "trigger", "result"),
		partition:     promreg.GaugeVec("ibkube_node_agent_partition_info", "1 for the partition label the agent wrote on its Node (the InfiniBand tenant key, a RoCE placement value); empty when the node has none.", "partition"),
		scanSeconds:   promreg.Histogram("ibkube_node_agent_scan_duration_seconds", "Duration of a hardware scan.", prometheus.ExponentialBuckets(0.0005, 4, 8)),
	}
	if err := promreg.Register(reg, m.devices, m.hcas, m.allocations, m.allocated, m.registrations, m.scans, m.scanSeconds, m.partition); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *metrics) setModel(model *resource.Model) {
	m.devices.Reset()
	for _, p := range model.Pools {
		m.devices.WithLabelValues(p.Resource, "Healthy").Set(0)
		m.devices.WithLabelValues(p.Resource, "Unhealthy").Set(0)
		for _, d := range p.Devices() {
			m.devices.WithLabelValues(p.Resource, d.Health).Inc()
		}
	}
	m.hcas.Reset()
	for _, r := range Report(model) {
		v := 0.0
		if r.Healthy {
			v = 1
		}
		m.hcas.WithLabelValues(r.Name, r.Resource).Set(v)
	}
}

// setPartition records the partition label now on the Node.
func (m *metrics) setPartition(label string) {
	m.partition.Reset()
	m.partition.WithLabelValues(label).Set(1)
}

// Registered implements server.Observer.
func (m *metrics) Registered(resource string, err error) {
	result := "success"
	if err != nil {
		result = "error"
	}
	m.registrations.WithLabelValues(resource, result).Inc()
}

// Allocated implements server.Observer.
func (m *metrics) Allocated(resource string, devices int) {
	m.allocations.WithLabelValues(resource).Inc()
	m.allocated.WithLabelValues(resource).Add(float64(devices))
}
