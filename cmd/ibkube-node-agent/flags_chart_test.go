package main

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/ibkube/ibkube/internal/rendered"
)

// TestFlagsDefaultToTheChart reads the DaemonSet the chart renders with its
// default values and holds every arg it passes the agent against the flag's
// own default, so that the agent run by hand and the agent the chart
// deploys behave the same, apart from the listed deployment choices.
func TestFlagsDefaultToTheChart(t *testing.T) {
	t.Parallel()
	objs, err := rendered.Defaults()
	if err != nil {
		t.Fatal(err)
	}
	ds, err := rendered.Find(objs, "DaemonSet", "ibkube-node-agent")
	if err != nil {
		t.Fatal(err)
	}
	args, err := rendered.ContainerArgs(ds, "agent")
	if err != nil {
		t.Fatal(err)
	}
	// The agent's pod sees the host's /sys, /dev and /proc under /host, and
	// the chart caps memlock (agent.nri.memlockMax).
	deployment := map[string]bool{"sysfs-root": true, "dev-root": true, "proc-root": true, "memlock-max": true}
	newFlags := func() *flag.FlagSet {
		var o options
		return flagSet(&o, func(string) string { return "" }, io.Discard)
	}
	if bad := rendered.FlagMismatches(newFlags, args, deployment); len(bad) > 0 {
		t.Errorf("the chart's agent args and the agent's flags disagree:\n%s", strings.Join(bad, "\n"))
	}
}
