package main

import (
	"flag"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"

	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/internal/testing/charttest"
)

func TestParseFlagsDefaults(t *testing.T) {
	t.Parallel()
	env := func(k string) string {
		if k == "NODE_NAME" {
			return "nd-0"
		}
		return ""
	}
	got, err := parseFlags(nil, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := options{
		config: "/etc/ibkube/agent.yaml", sysfsRoot: "/sys", devRoot: "/dev", procRoot: "/proc", hostDevRoot: "/dev",
		kubeletSocketDir: "/var/lib/kubelet/device-plugins", nodeName: "nd-0", stateDir: "/var/lib/ibkube",
		netlink: true, nri: true, ncclRankConf: true,
		containerd: containerdOptions{address: "/run/containerd/containerd.sock", namespace: "k8s.io", snapshotters: "overlayfs"},
		nriSocket:  "/var/run/nri/nri.sock", metricsAddr: ":8090", healthAddr: ":8091", logLevel: "info",
		observe: observeOptions{counters: true, period: 15 * time.Second, idleWindow: 10 * time.Minute, idleMinBytes: 1 << 20,
			podResourcesSocket: "/var/lib/kubelet/pod-resources/kubelet.sock"},
		dra: draOptions{allocation: "deviceplugin", cdiDir: "/var/run/cdi",
			pluginDir: "/var/lib/kubelet/plugins/rdma.infiniband.azure.com", registryDir: "/var/lib/kubelet/plugins_registry"},
	}
	if d := cmp.Diff(want, got, cmp.AllowUnexported(options{}, observeOptions{}, draOptions{}, containerdOptions{})); d != "" {
		t.Errorf("defaults (-want +got):\n%s", d)
	}
}

func TestParseFlagsErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--log-level", "loud"}, `--log-level "loud": want error, info or debug`},
		{[]string{"extra"}, `unexpected arguments ["extra"]: ibkube-node-agent takes flags only`},
		{[]string{"--no-such-flag"}, `flag provided but not defined: -no-such-flag`},
		{[]string{"--counters-period=0s"}, `--counters-period 0s: want a positive duration such as 15s`},
		{[]string{"--rdma-idle-window=20s"}, `--rdma-idle-window 20s: want at least two --counters-period (30s), else no window holds two readings`},
		{[]string{"--allocation=both"}, `--allocation "both": want deviceplugin or dra`},
	} {
		_, err := parseFlags(tc.args, func(string) string { return "" }, io.Discard)
		if err == nil || err.Error() != tc.want {
			t.Errorf("parseFlags(%q) = %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestNewAgentOnFixture(t *testing.T) {
	t.Parallel()
	dir := fixture.BuildTemp(t, "ndv5")
	_, err := newAgent(options{
		config: filepath.Join(dir, "missing.yaml"), sysfsRoot: fixture.SysfsRoot(dir), devRoot: fixture.DevRoot(dir),
		kubeletSocketDir: t.TempDir(), stateDir: t.TempDir(),
	}, nil, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, "apiVersion: ibkube.io/v1alpha1\nkind: AgentConfig\npools: []\n")
	if _, err := newAgent(options{config: bad}, nil, logr.Discard()); err == nil {
		t.Error("a config without pools was accepted")
	}
}

// TestFlagsDefaultToTheChart reads the DaemonSet the chart renders with its
// default values and holds every arg it passes the agent against the flag's
// own default, so that the agent run by hand and the agent the chart
// deploys behave the same, apart from the listed deployment choices.
func TestFlagsDefaultToTheChart(t *testing.T) {
	t.Parallel()
	// The agent's pod sees the host's /sys, /dev and /proc under /host, and
	// the chart caps memlock (agent.nri.memlockMax).
	deployment := map[string]bool{"sysfs-root": true, "dev-root": true, "proc-root": true, "memlock-max": true}
	newFlags := func() *flag.FlagSet { return flagSet(new(options), func(string) string { return "" }, io.Discard) }
	charttest.CheckDefaultFlags(t, "DaemonSet", "ibkube-node-agent", "agent", newFlags, deployment)
}
