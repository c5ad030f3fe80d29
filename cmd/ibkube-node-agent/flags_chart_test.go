package main

import (
	"flag"
	"io"
	"testing"

	"github.com/ibkube/ibkube/internal/testing/charttest"
)

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
