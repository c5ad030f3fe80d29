package handler

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ibkube/ibkube/internal/promreg"
)

// Outcomes of one admission request, the "outcome" label of the metrics.
const (
	OutcomeInjected  = "injected"  // the core changed the pod
	OutcomeUnchanged = "unchanged" // the core saw the pod and left it as it was
	OutcomeRefused   = "refused"   // denied: a refusal from the core or a missing network
	OutcomeError     = "error"     // the request could not be answered (bad body, lookup failure)
	OutcomeSkipped   = "skipped"   // not ours: not a pod CREATE, namespace not opted in or protected
)

// Metrics are the handler's Prometheus collectors. A nil *Metrics records nothing.
type Metrics struct {
	mutations *prometheus.CounterVec
	latency   *prometheus.HistogramVec
}

// NewMetrics creates the collectors and registers them with reg (the
// controller-runtime registry in the server, a fresh one in tests).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		mutations: promreg.CounterVec("ibkube_webhook_mutations_total", "Pod admission requests handled, by requested mode and outcome (injected, unchanged, refused, error, skipped).", "mode", "outcome"),
		// Most answers take tens of microseconds; lookups on a cold cache take milliseconds.
		latency: promreg.HistogramVec("ibkube_webhook_mutation_duration_seconds",
			"Time to answer one admission request (decode, lookups, mutate, patch, encode), by outcome.",
			[]float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1}, "outcome"),
	}
	if err := promreg.Register(reg, m.mutations, m.latency); err != nil {
		return nil, fmt.Errorf("register webhook metrics: %w", err)
	}
	return m, nil
}

func (m *Metrics) observe(mode, outcome string, took time.Duration) {
	if m == nil {
		return
	}
	m.mutations.WithLabelValues(mode, outcome).Inc()
	m.latency.WithLabelValues(outcome).Observe(took.Seconds())
}
