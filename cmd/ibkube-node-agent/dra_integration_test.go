//go:build integration

package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/internal/testing/dratest"
	"github.com/ibkube/ibkube/internal/testing/testenv"
)

// TestRunDRA runs the whole agent as main does with --allocation=dra against
// a real kube-apiserver: it passes the gate check, publishes the ND v5
// node's ResourceSlice, registers with the kubelet's plugin registry, never
// opens a device plugin socket, and removes its sockets when it stops (the
// next pod of a rolling update must not find stale ones).
func TestRunDRA(t *testing.T) {
	restCfg, env := testenv.Start(t, "test-integration-dra")
	cs := testenv.Clientset(t, restCfg)
	ctx := context.Background()
	testenv.CreateNode(ctx, t, cs, "nd-0")
	dir := fixture.BuildTemp(t, fixture.NDv5)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	sockets := dratest.SocketDir(t, "agent")
	devicePlugins, plugin, registry := filepath.Join(sockets, "dp"), filepath.Join(sockets, "p"), filepath.Join(sockets, "r")
	// The kubelet makes the device-plugins and registry directories; the
	// driver's own directory under plugins is the agent's to make.
	for _, d := range []string{devicePlugins, registry} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- run(runCtx, []string{
			"--allocation=dra", "--node-name=nd-0", "--kubeconfig", kubeconfig, "--pod-uid=0b1c2d3e-agent-pod",
			"--sysfs-root", fixture.SysfsRoot(dir), "--dev-root", fixture.DevRoot(dir), "--netlink=false",
			"--config", filepath.Join(dir, "missing.yaml"), "--state-dir", t.TempDir(), "--nri=false", "--counters=false",
			"--kubelet-socket-dir", devicePlugins, "--kubelet-plugin-dir", plugin, "--kubelet-registry-dir", registry,
			"--cdi-dir", t.TempDir(), "--metrics-bind-address=0", "--health-probe-bind-address=0", "--log-level=error",
		})
	}()
	pool := dratest.Pool(ctx, t, cs, 60*time.Second, done)
	if s := pool.Slices[0].Spec; s.Driver != contract.DRADriverName || len(pool.Devices) != 16 {
		t.Errorf("slices: driver %s, %d devices; want %s, 16", s.Driver, len(pool.Devices), contract.DRADriverName)
	}
	entries := func(d string) []string {
		es, _ := os.ReadDir(d)
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		return names
	}
	if got := entries(devicePlugins); len(got) != 0 {
		t.Errorf("device plugin sockets in DRA mode: %v", got)
	}
	if got := entries(registry); len(got) != 1 {
		t.Errorf("registry dir holds %v, want one registration socket (rolling-update name)", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
	if got := append(entries(registry), entries(plugin)...); len(got) != 0 {
		t.Errorf("sockets left after a clean stop: %v", got)
	}
}
