package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"

	"github.com/ibkube/ibkube/internal/cmdline"
	"github.com/ibkube/ibkube/internal/logging"
	"github.com/ibkube/ibkube/webhook/certs"
	"github.com/ibkube/ibkube/webhook/server"
)

// options is everything the command line says.
type options struct {
	server     server.Config
	certs      certs.Options
	kubeconfig string
	logLevel   string
	logFormat  string
	help       bool
}

// flagSet defines the command line into o; a test reads its defaults.
func flagSet(o *options, getenv func(string) string, out io.Writer) *flag.FlagSet {
	fs := cmdline.NewFlagSet("ibkube-webhook", out)
	s := &o.server
	s.Limits = server.DefaultLimits()
	fs.StringVar(&s.ConfigFile, "config", "/etc/ibkube/webhook.yaml", "WebhookConfig file (missing at start: built-in defaults); re-read when it changes, a bad or vanished file keeps the last good one")
	fs.DurationVar(&s.ConfigPoll, "config-poll", time.Minute, "also re-read --config this often, in case a change event is missed (0: never)")
	fs.StringVar(&s.CertDir, "cert-dir", "/tmp/k8s-webhook-server/serving-certs", "directory with tls.crt and tls.key, reloaded on rotation")
	fs.StringVar(&s.Host, "host", "", "address the webhook server listens on (empty: all)")
	fs.IntVar(&s.Port, "port", 9443, "webhook server port; the webhook path is /mutate-v1-pod")
	fs.IntVar(&s.Limits.MaxInFlight, "max-requests-in-flight", s.Limits.MaxInFlight, "admission requests decided at once, each taking a slot only once its body has arrived; more wait up to 2 s, then get 429 with Retry-After (each may hold a few times the 4 MiB body cap: size it with the memory limit)")
	fs.IntVar(&s.Limits.MaxConns, "max-connections", s.Limits.MaxConns, "open connections to the webhook port; at the cap an idle (or silent) one is closed to admit a new one, else the new one is closed when accepted")
	fs.DurationVar(&s.Limits.DrainPeriod, "shutdown-drain", s.Limits.DrainPeriod, "after SIGTERM, keep answering this long with Connection: close so the API server's kept-alive connections end cleanly (keep below the pod's terminationGracePeriodSeconds minus its preStop)")
	fs.StringVar(&s.MetricsBindAddress, "metrics-bind-address", ":8080", "Prometheus /metrics address (0: off)")
	fs.StringVar(&s.HealthProbeBindAddress, "health-probe-bind-address", ":8081", "/healthz and /readyz address (0: off)")
	fs.StringVar(&s.ReleaseNamespace, "namespace", getenv("POD_NAMESPACE"), "namespace ibkube runs in (default $POD_NAMESPACE): never mutated, and the default namespace of the IPoIB network")
	fs.BoolVar(&s.CheckNetworks, "check-networks", true, "refuse ipoib pods whose NetworkAttachmentDefinition is missing or when the cluster serves no NetworkAttachmentDefinitions")
	fs.StringVar(&o.kubeconfig, ctrlconfig.KubeconfigFlagName, "", "kubeconfig file (default: in-cluster, then $KUBECONFIG, then ~/.kube/config)")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: error, info or debug")
	fs.StringVar(&o.logFormat, "log-format", "json", "log format: json or text")
	o.certs.AddFlags(fs)
	return fs
}

// parseFlags reads args (without the program name); getenv supplies defaults
// such as $POD_NAMESPACE. Usage and errors go to out.
func parseFlags(args []string, getenv func(string) string, out io.Writer) (o options, err error) {
	fs := flagSet(&o, getenv, out)
	o.help, err = cmdline.Parse(fs, args, func() error { return o.check(fs) })
	return o, err
}

// check validates the parsed command line and completes the cert options.
func (o *options) check(fs *flag.FlagSet) error {
	s := &o.server
	if err := cmdline.NoArgs(fs); err != nil {
		return err
	}
	if s.Port < 1 || s.Port > 65535 {
		return fmt.Errorf("--port %d: want 1-65535", s.Port)
	}
	if err := s.Limits.Validate(); err != nil {
		return fmt.Errorf("--max-requests-in-flight, --max-connections, --shutdown-drain: %w", err)
	}
	if s.ReleaseNamespace == "" {
		return errors.New("--namespace is empty and $POD_NAMESPACE is unset: give the namespace ibkube runs in")
	}
	o.certs.Namespace, o.certs.CertDir = s.ReleaseNamespace, s.CertDir
	if err := o.certs.Validate(); err != nil {
		return err
	}
	if _, err := logging.ParseLevel(o.logLevel); err != nil {
		return err
	}
	if err := logging.CheckFormat(o.logFormat); err != nil {
		return err
	}
	return nil
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
		}
		return c, nil
	}
	c, err := ctrlconfig.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("API server config: %w", err)
	}
	return c, nil
}
