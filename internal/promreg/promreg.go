// Package promreg registers a component's Prometheus collectors as one step.
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
