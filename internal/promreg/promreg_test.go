package promreg_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ibkube/ibkube/internal/promreg"
)

func TestRegister(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	a := prometheus.NewCounter(prometheus.CounterOpts{Name: "ibkube_test_a_total", Help: "a"})
	b := prometheus.NewGauge(prometheus.GaugeOpts{Name: "ibkube_test_b", Help: "b"})
	if err := promreg.Register(reg, a, b); err != nil {
		t.Fatalf("Register: %v", err)
	}
	got, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Errorf("gathered %d families, want 2", len(got))
	}
	again := prometheus.NewGauge(prometheus.GaugeOpts{Name: "ibkube_test_b", Help: "b"})
	err = promreg.Register(reg, again)
	if err == nil || !strings.Contains(err.Error(), "ibkube_test_b") {
		t.Errorf("second registration of ibkube_test_b: error %v, want one naming the metric", err)
	}
}

func TestConstructors(t *testing.T) {
	t.Parallel()
	for want, c := range map[string]prometheus.Collector{
		`Desc{fqName: "ibkube_test_up", help: "up help", unit: "", constLabels: {}, variableLabels: {}}`:            promreg.Gauge("ibkube_test_up", "up help"),
		`Desc{fqName: "ibkube_test_state", help: "state help", unit: "", constLabels: {}, variableLabels: {state}}`: promreg.GaugeVec("ibkube_test_state", "state help", "state"),
		`Desc{fqName: "ibkube_test_total", help: "total help", unit: "", constLabels: {}, variableLabels: {a,b}}`:   promreg.CounterVec("ibkube_test_total", "total help", "a", "b"),
	} {
		ch := make(chan *prometheus.Desc, 1)
		c.Describe(ch)
		if got := (<-ch).String(); got != want {
			t.Errorf("descriptor %s, want %s", got, want)
		}
	}
}
