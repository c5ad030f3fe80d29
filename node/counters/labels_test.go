package counters

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ibkube/ibkube/hca/inventory"
)

// TestCollectNamesNotUTF8 reads an HCA and a hw_counters file whose names
// are not valid UTF-8 (sysfs names are bytes) beside a normal HCA: every
// series is exported, the odd bytes written as \xNN, and the scrape of the
// whole registry answers 200 with the normal HCA's series too.
func TestCollectNamesNotUTF8(t *testing.T) {
	t.Parallel()
	sys := t.TempDir()
	odd := "mlx5_\xff"
	writeCounter(t, sys, odd, 1, "counters/"+XmitData, "10")
	writeCounter(t, sys, odd, 1, "hw_counters/rx_\xfe_drops", "3")
	writeCounter(t, sys, "mlx5_0", 1, "counters/"+XmitData, "20")
	node := inventory.Node{HCAs: []inventory.HCA{
		{Name: odd, Ports: []inventory.Port{{Number: 1}}},
		{Name: "mlx5_0", Ports: []inventory.Port{{Number: 1}}},
	}}
	m, err := NewMonitor(MonitorConfig{
		Reader: Reader{SysfsRoot: sys},
		Source: fakeSource{node},
		Period: time.Minute,
		Idle:   IdleRule{Window: 5 * time.Minute, MinBytes: 1 << 20},
	}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	m.Step(context.Background())
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)

	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: %d %s", rec.Code, body)
	}
	for _, want := range []string{
		`ibkube_rdma_port_data_bytes_total{direction="xmit",hca="mlx5_0",holder_container="",holder_namespace="",holder_pod="",port="1"} 80`,
		`ibkube_rdma_port_data_bytes_total{direction="xmit",hca="mlx5_\\xff",holder_container="",holder_namespace="",holder_pod="",port="1"} 40`,
		`hca="mlx5_\\xff",port="1"} 3`,
		`counter="rx_\\xfe_drops"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %s:\n%s", want, body)
		}
	}
}

func TestLabelValue(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"mlx5_0":       "mlx5_0",
		"rx_\xfe":      `rx_\xfe`,
		"ü\xc3":        `ü\xc3`,
		"\xe2\x82":     `\xe2\x82`,
		"tx_€_packets": "tx_€_packets",
	} {
		if got := labelValue(in); got != want {
			t.Errorf("labelValue(%q) = %q, want %q", in, got, want)
		}
	}
}
