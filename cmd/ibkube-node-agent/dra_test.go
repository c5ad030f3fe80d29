package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ibkube/ibkube/hca/fixture"
)

// TestRunDRAWithoutAPIServer: DRA mode cannot work without the API server
// (slices, the gate check); the agent says so and how to give it one,
// instead of falling back to device plugins.
func TestRunDRAWithoutAPIServer(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	dir := fixture.BuildTemp(t, fixture.HB)
	base := []string{
		"--allocation=dra", "--node-name=nd-0", "--sysfs-root", fixture.SysfsRoot(dir), "--dev-root", fixture.DevRoot(dir), "--netlink=false",
		"--config", filepath.Join(dir, "missing.yaml"), "--state-dir", t.TempDir(), "--nri=false", "--counters=false",
		"--metrics-bind-address=0", "--health-probe-bind-address=0", "--log-level=error",
	}
	for _, tc := range []struct {
		extra []string
		want  string
	}{
		{nil, "--allocation=dra needs the API server"},
		{[]string{"--kubeconfig", filepath.Join(dir, "absent.kubeconfig")}, "--kubeconfig " + filepath.Join(dir, "absent.kubeconfig")},
	} {
		err := run(context.Background(), append(base, tc.extra...))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run %v = %v, want an error containing %q", tc.extra, err, tc.want)
		}
	}
}
