package counters

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/ibkube/ibkube/hca/discovery"
	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/internal/testing/nodetest"
)

// ndv5Targets is every port of the ND H100 v5 fixture (9 HCAs), as discovery sees it.
func ndv5Targets(b *testing.B, sys, dev string) []Target {
	b.Helper()
	node, err := discovery.NewScanner(discovery.Options{SysfsRoot: sys, DevRoot: dev, Logger: logr.Discard()}).Scan(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	ts := Targets(node)
	if len(ts) != 9 {
		b.Fatalf("%d ports in the ND H100 v5 fixture, want 9", len(ts))
	}
	return ts
}

// BenchmarkReadNDv5 reads every counter of the 9-HCA ND H100 v5 fixture
// once: the sysfs cost of one reading (issue goal: <= 1 ms per scrape).
func BenchmarkReadNDv5(b *testing.B) {
	dir := fixture.BuildTemp(b, fixture.NDv5)
	ts := ndv5Targets(b, fixture.SysfsRoot(dir), fixture.DevRoot(dir))
	r := Reader{SysfsRoot: fixture.SysfsRoot(dir)}
	b.ReportAllocs()
	for b.Loop() {
		r.Read(ts)
	}
}

// BenchmarkStepAndScrapeNDv5 is a reading folded into the totals plus one
// Prometheus scrape rendered as text: reading and exporting every counter.
func BenchmarkStepAndScrapeNDv5(b *testing.B) {
	dir := fixture.BuildTemp(b, fixture.NDv5)
	sys, dev := fixture.SysfsRoot(dir), fixture.DevRoot(dir)
	node, err := discovery.NewScanner(discovery.Options{SysfsRoot: sys, DevRoot: dev, Logger: logr.Discard()}).Scan(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	m, err := NewMonitor(MonitorConfig{Reader: Reader{SysfsRoot: sys}, Source: fakeSource{node},
		Period: time.Second, Idle: IdleRule{Window: time.Minute}}, logr.Discard())
	if err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	b.ReportAllocs()
	for b.Loop() {
		m.Step(context.Background())
		scrape(b, reg)
	}
}

// BenchmarkScrapeNDv5 is what a Prometheus scrape costs with the monitor's
// cache: formatting the last reading of the 9 HCAs, no sysfs read.
func BenchmarkScrapeNDv5(b *testing.B) {
	dir := fixture.BuildTemp(b, fixture.NDv5)
	sys := fixture.SysfsRoot(dir)
	m, err := NewMonitor(MonitorConfig{Reader: Reader{SysfsRoot: sys}, Source: fakeSource{nodetest.Scan(b, dir)},
		Period: time.Second, Idle: IdleRule{Window: time.Minute}}, logr.Discard())
	if err != nil {
		b.Fatal(err)
	}
	m.Step(context.Background())
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	b.ReportAllocs()
	for b.Loop() {
		scrape(b, reg)
	}
}

// scrape gathers reg and writes it in the text format, as a Prometheus
// scrape of /metrics does.
func scrape(b *testing.B, reg *prometheus.Registry) {
	b.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	enc := expfmt.NewEncoder(io.Discard, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			b.Fatal(err)
		}
	}
}
