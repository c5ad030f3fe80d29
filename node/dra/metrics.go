package dra

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ibkube/ibkube/internal/promreg"
)

// metrics are the driver's Prometheus series (namespace ibkube_node_agent,
// subsystem dra).
type metrics struct {
	publishes   prometheus.Counter
	sliceErrors prometheus.Counter
	staleSpecs  prometheus.Counter
	heldTwice   prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		publishes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ibkube_node_agent_dra_slice_publishes_total",
			Help: "ResourceSlice contents handed to the slice controller, which writes the slices that changed; a flapping port adds one, not one per flap.",
		}),
		sliceErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ibkube_node_agent_dra_slice_errors_total",
			Help: "Errors of the ResourceSlice controller: a slice the API server refused or stored without some fields (also a ResourceSliceRejected Event on the node).",
		}),
		staleSpecs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ibkube_node_agent_dra_stale_cdi_specs_removed_total",
			Help: "CDI specs removed because their ResourceClaim no longer exists (or is no longer allocated), found at start and periodically.",
		}),
		heldTwice: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ibkube_node_agent_dra_hcas_held_twice",
			Help: "HCAs that prepared claims hold both exclusively and otherwise (from before HCA holds and counters), found at start; each is also an HCAHeldTwice Event on the node.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	if err := promreg.Register(reg, m.publishes, m.sliceErrors, m.staleSpecs, m.heldTwice); err != nil {
		return nil, err
	}
	return m, nil
}
