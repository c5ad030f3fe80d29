package main

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/ibkube/ibkube/internal/rendered"
)

// TestFlagsDefaultToTheChart reads the Deployment the chart renders with its
// default values and holds every arg it passes the webhook (the cert flags
// included: the Secret, webhook configuration and Service names the chart
// creates) against the flag's own default.
func TestFlagsDefaultToTheChart(t *testing.T) {
	t.Parallel()
	objs, err := rendered.Defaults()
	if err != nil {
		t.Fatal(err)
	}
	d, err := rendered.Find(objs, "Deployment", "ibkube-webhook")
	if err != nil {
		t.Fatal(err)
	}
	args, err := rendered.ContainerArgs(d, "webhook")
	if err != nil {
		t.Fatal(err)
	}
	// The chart names the release namespace; the binary takes $POD_NAMESPACE.
	deployment := map[string]bool{"namespace": true}
	newFlags := func() *flag.FlagSet {
		var o options
		return flagSet(&o, func(string) string { return "" }, io.Discard)
	}
	if bad := rendered.FlagMismatches(newFlags, args, deployment); len(bad) > 0 {
		t.Errorf("the chart's webhook args and the webhook's flags disagree:\n%s", strings.Join(bad, "\n"))
	}
}
