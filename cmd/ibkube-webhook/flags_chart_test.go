package main

import (
	"flag"
	"io"
	"testing"

	"github.com/ibkube/ibkube/internal/testing/charttest"
)

// TestFlagsDefaultToTheChart reads the Deployment the chart renders with its
// default values and holds every arg it passes the webhook (the cert flags
// included: the Secret, webhook configuration and Service names the chart
// creates) against the flag's own default.
func TestFlagsDefaultToTheChart(t *testing.T) {
	t.Parallel()
	// The chart names the release namespace; the binary takes $POD_NAMESPACE.
	deployment := map[string]bool{"namespace": true}
	newFlags := func() *flag.FlagSet { return flagSet(new(options), func(string) string { return "" }, io.Discard) }
	charttest.CheckDefaultFlags(t, "Deployment", "ibkube-webhook", "webhook", newFlags, deployment)
}
