// Package promreg is the one way ibkube builds its Prometheus metrics: the
// collectors (and a custom collector's descriptors) from their name, help
// text and labels, registered as one step.
package promreg

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers every collector with reg and stops at the first that
// fails, naming it: a second registration of the same metric is a wiring
// mistake the caller should report, not skip.
func Register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register %s: %w", describe(c), err)
		}
	}
	return nil
}

// describe names a collector by its first metric's descriptor.
func describe(c prometheus.Collector) string {
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	d, ok := <-ch
	for range ch {
	}
	if !ok {
		return "collector"
	}
	return d.String()
}

// Gauge returns a gauge with that name and help text.
func Gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

// GaugeVec returns a gauge vector with that name, help text and labels.
func GaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}

// CounterVec returns a counter vector with that name, help text and labels.
func CounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

// Histogram returns a histogram with that name, help text and buckets.
func Histogram(name, help string, buckets []float64) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
}

// HistogramVec returns a histogram vector with that name, help text,
// buckets and labels.
func HistogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
}

// Desc returns the descriptor of a custom collector's metric with that
// name, help text and variable labels.
func Desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}
