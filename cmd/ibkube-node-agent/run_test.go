package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/internal/testing/freeport"
	"github.com/ibkube/ibkube/internal/testing/kubeletstub"
)

// TestRunWithoutNRI runs the whole agent as main does: without the
// runtime's NRI socket (containerd 1.x) and with --nri=false it still
// serves the devices, and /metrics says whether memlock is managed.
func TestRunWithoutNRI(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		nri      string
		metric   string // a /metrics line that must be there
		noMetric string // a metric that must not be there
	}{
		{name: "socket absent", nri: "--nri=true", metric: `ibkube_nri_state{state="no_socket"} 1`},
		{name: "disabled", nri: "--nri=false", metric: `ibkube_node_agent_devices{health="Healthy",resource="rdma/ib"} 8`, noMetric: "ibkube_nri_connected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir, sockets := t.TempDir(), t.TempDir()
			if err := fixture.Build(dir, fixture.NDv5); err != nil {
				t.Fatal(err)
			}
			stub := kubeletstub.Start(t, sockets)
			metrics := freeport.Addr(t)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- run(ctx, []string{
					"--sysfs-root", fixture.SysfsRoot(dir), "--dev-root", fixture.DevRoot(dir), "--netlink=false",
					"--config", filepath.Join(dir, "missing.yaml"), "--kubelet-socket-dir", sockets, "--state-dir", t.TempDir(),
					tc.nri, "--nri-socket", filepath.Join(dir, "no-nri", "nri.sock"),
					"--metrics-bind-address", metrics, "--health-probe-bind-address", "0", "--log-level", "error",
				})
			}()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("run: %v", err)
				}
			}()
			if _, err := stub.WaitList("rdma/ib", 10*time.Second, func(d []*pluginapi.Device) bool { return len(d) == 8 }); err != nil {
				t.Fatal("devices not served: ", err)
			}
			var body string
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				body = get(t, "http://"+metrics+"/metrics")
				if hasLine(body, tc.metric) || time.Now().After(deadline) {
					break
				}
			}
			if !hasLine(body, tc.metric) {
				t.Errorf("/metrics lacks %q", tc.metric)
			}
			if tc.noMetric != "" && strings.Contains(body, tc.noMetric) {
				t.Errorf("/metrics has %q with NRI disabled", tc.noMetric)
			}
		})
	}
}

// get returns the body of url, "" while it cannot be fetched.
func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// hasLine says whether the exposition body has line exactly (a sample, not
// the HELP text that may quote it).
func hasLine(body, line string) bool {
	return slices.Contains(strings.Split(body, "\n"), line)
}
