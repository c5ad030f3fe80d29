package main

import (
	"bytes"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ibkube/ibkube/internal/testing/charttest"
	"github.com/ibkube/ibkube/webhook/server"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestParseFlags(t *testing.T) {
	t.Parallel()
	defaults := server.Config{
		ConfigFile:             "/etc/ibkube/webhook.yaml",
		ConfigPoll:             time.Minute,
		CertDir:                "/tmp/k8s-webhook-server/serving-certs",
		Port:                   9443,
		MetricsBindAddress:     ":8080",
		HealthProbeBindAddress: ":8081",
		ReleaseNamespace:       "ibkube-system",
		CheckNetworks:          true,
		Limits:                 server.DefaultLimits(),
	}
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    func(*server.Config)
		wantErr string
	}{
		{name: "defaults from the contract, namespace from $POD_NAMESPACE", env: map[string]string{"POD_NAMESPACE": "ibkube-system"}},
		{
			name: "every server flag",
			args: []string{"--config=/cfg/w.yaml", "--config-poll=0", "--cert-dir=/certs", "--host=127.0.0.1", "--port=10250",
				"--metrics-bind-address=0", "--health-probe-bind-address=:9000", "--namespace=ibkube-system", "--check-networks=false",
				"--cert-management=external", "--max-requests-in-flight=4", "--max-connections=64"},
			want: func(c *server.Config) {
				c.ConfigFile, c.ConfigPoll, c.CertDir, c.Host, c.Port = "/cfg/w.yaml", 0, "/certs", "127.0.0.1", 10250
				c.MetricsBindAddress, c.HealthProbeBindAddress, c.CheckNetworks = "0", ":9000", false
				c.Limits.MaxInFlight, c.Limits.MaxConns = 4, 64
			},
		},
		{name: "--namespace wins over $POD_NAMESPACE", args: []string{"--namespace", "ibkube-system"}, env: map[string]string{"POD_NAMESPACE": "other"}},
		{name: "no namespace at all", wantErr: "--namespace is empty"},
		{name: "port out of range", args: []string{"--namespace=x", "--port=70000"}, wantErr: "--port 70000"},
		{name: "no request in flight allowed", args: []string{"--namespace=x", "--max-requests-in-flight=0"}, wantErr: "max in-flight requests 0: want at least 1"},
		{name: "unknown flag", args: []string{"--namespace=x", "--prot=1"}, wantErr: "flag provided but not defined: -prot"},
		{name: "positional argument", args: []string{"--namespace=x", "serve"}, wantErr: "unexpected arguments"},
		{name: "bad log level", args: []string{"--namespace=x", "--log-level=trace"}, wantErr: "--log-level \"trace\""},
		{name: "bad log format", args: []string{"--namespace=x", "--log-format=xml"}, wantErr: "--log-format \"xml\""},
		{name: "bad cert management", args: []string{"--namespace=x", "--cert-management=manual"}, wantErr: "--cert-management \"manual\""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			got, err := parseFlags(tc.args, env(tc.env), &out)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := defaults
			if tc.want != nil {
				tc.want(&want)
			}
			if diff := cmp.Diff(want, got.server, cmp.FilterPath(func(p cmp.Path) bool {
				f := p.Last().String()
				return f == ".CertSetup" || f == ".Log" || f == ".Registry" || f == ".Rest"
			}, cmp.Ignore())); diff != "" {
				t.Errorf("server config (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseFlagsHelp(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	o, err := parseFlags([]string{"-h"}, env(nil), &out)
	if err != nil || !o.help {
		t.Fatalf("-h: help=%v err=%v", o.help, err)
	}
	for _, f := range []string{"-config", "-cert-dir", "-port", "-metrics-bind-address", "-health-probe-bind-address", "-namespace", "-check-networks", "-cert-management"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("usage does not list %s", f)
		}
	}
}

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
