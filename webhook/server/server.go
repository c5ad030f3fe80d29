// Package server runs the admission webhook process: the TLS webhook server
// (controller-runtime), the namespace and NetworkAttachmentDefinition metadata
// cache, health and readiness probes, Prometheus metrics, and the config file
// watcher.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/ibkube/ibkube/webhook/config"
	"github.com/ibkube/ibkube/webhook/handler"
)

// Config is everything Run needs; cmd/ibkube-webhook fills it from flags.
type Config struct {
	// ConfigFile is the WebhookConfig YAML; missing means the built-in defaults.
	ConfigFile string
	// ConfigPoll re-reads the config file on this interval besides watching it
	// (0: watch only).
	ConfigPoll time.Duration
	// CertDir holds tls.crt and tls.key, reloaded when they change.
	CertDir string
	// Host and Port of the webhook server ("" = all addresses).
	Host string
	Port int
	// MetricsBindAddress and HealthProbeBindAddress: "0" turns them off.
	MetricsBindAddress     string
	HealthProbeBindAddress string
	// ReleaseNamespace is where ibkube runs: never mutated, and the default
	// namespace of the IPoIB network.
	ReleaseNamespace string
	// Limits bound time, size and concurrency of admission requests; a zero
	// Limits means DefaultLimits.
	Limits Limits
	// CheckNetworks refuses ipoib pods whose NetworkAttachmentDefinition is
	// missing (or when the cluster has no NAD API).
	CheckNetworks bool

	// Rest is the API server connection.
	Rest *rest.Config
	Log  logr.Logger

	// CertSetup, if set, runs before the webhook server starts: for self-managed
	// certificates (webhook/certs) it adds a cert rotator to mgr and returns a
	// channel closed once tls.crt/tls.key are in CertDir. The webhook server,
	// and so readiness, waits for it.
	CertSetup func(ctx context.Context, mgr manager.Manager) (ready <-chan struct{}, err error)

	// Registry receives the metrics; nil means controller-runtime's registry,
	// the one its /metrics endpoint serves. Tests pass their own.
	Registry ctrlmetrics.RegistererGatherer
}

// Run serves until ctx ends or something fails.
func Run(ctx context.Context, cfg Config) error {
	log := cfg.Log
	if cfg.Rest == nil {
		return errors.New("server: no API server configuration")
	}
	reg := cfg.Registry
	if reg == nil {
		reg = ctrlmetrics.Registry
	}

	store, err := newConfigStore(cfg.ConfigFile, func(c *config.Config) { c.ReleaseNamespace = cfg.ReleaseNamespace },
		reg, log.WithName("config"))
	if err != nil {
		return err
	}
	log.Info("webhook config loaded", "path", cfg.ConfigFile, "defaults", store.missing)

	mgr, err := newManager(cfg)
	if err != nil {
		return err
	}
	srv, err := newTLSServer(cfg, mgr, store, reg)
	if err != nil {
		return err
	}
	if err := addRunnables(ctx, cfg, mgr, srv, store); err != nil {
		return err
	}
	log.Info("starting", "port", cfg.Port, "certDir", cfg.CertDir, "releaseNamespace", cfg.ReleaseNamespace,
		"checkNetworks", cfg.CheckNetworks)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("webhook manager: %w", err)
	}
	return nil
}

// newManager is the controller-runtime manager the webhook runs under,
// serving metrics and health probes, without a webhook server of its own.
func newManager(cfg Config) (manager.Manager, error) {
	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		return nil, fmt.Errorf("scheme: %w", err)
	}
	// The aligned claim's templates, which the templates controller writes.
	if err := resourceapi.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("scheme: %w", err)
	}
	mgr, err := manager.New(cfg.Rest, manager.Options{
		Scheme: scheme,
		Logger: cfg.Log,
		Cache: cache.Options{
			// The cache holds only what the handler reads (namespaces, NAD
			// metadata), as PartialObjectMetadata, without managedFields.
			DefaultTransform: cache.TransformStripManagedFields(),
		},
		Metrics:                metricsserver.Options{BindAddress: cfg.MetricsBindAddress},
		HealthProbeBindAddress: cfg.HealthProbeBindAddress,
		// The webhook server is added by hand, gated on CertSetup.
		WebhookServer: nil,
	})
	if err != nil {
		return nil, fmt.Errorf("create manager: %w", err)
	}
	return mgr, nil
}

// newTLSServer is the admission handler behind the server's limits,
// reading namespaces (and NADs when CheckNetworks) through mgr's cache.
func newTLSServer(cfg Config, mgr manager.Manager, store *configStore, reg ctrlmetrics.RegistererGatherer) (*tlsServer, error) {
	metrics, err := handler.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	lookup := handler.ClientLookup{Cached: mgr.GetCache(), Live: mgr.GetAPIReader()}
	opts := handler.Options{
		Config:           store.Current,
		Namespaces:       lookup,
		ReleaseNamespace: cfg.ReleaseNamespace,
		Metrics:          metrics,
		Log:              cfg.Log.WithName("admission"),
	}
	if cfg.CheckNetworks {
		opts.Networks = lookup
	}
	h, err := handler.New(opts)
	if err != nil {
		return nil, err
	}
	limits := cfg.Limits
	if limits == (Limits{}) {
		limits = DefaultLimits()
	}
	if err := limits.Validate(); err != nil {
		return nil, fmt.Errorf("webhook server limits: %w", err)
	}
	limitMetrics, err := newLimitMetrics(reg)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(handler.Path, h)
	return &tlsServer{
		host: cfg.Host, port: cfg.Port, certDir: cfg.CertDir,
		handler: mux, limits: limits, metrics: limitMetrics,
		tlsOpts: []func(*tls.Config){hardenTLS},
		log:     cfg.Log.WithName("server"),
	}, nil
}

// addRunnables adds to mgr the webhook server (started once certificates
// are ready), the cache warmer, the config watcher, the aligned claim
// templates' controller and the health checks.
func addRunnables(ctx context.Context, cfg Config, mgr manager.Manager, srv *tlsServer, store *configStore) error {
	var certsReady <-chan struct{}
	if cfg.CertSetup != nil {
		var err error
		certsReady, err = cfg.CertSetup(ctx, mgr)
		if err != nil {
			return fmt.Errorf("certificate setup: %w", err)
		}
	}
	if err := mgr.Add(gatedServer{srv: srv, ready: certsReady, log: cfg.Log}); err != nil {
		return fmt.Errorf("add webhook server: %w", err)
	}
	warm := &cacheWarmer{cache: mgr.GetCache(), networks: cfg.CheckNetworks, log: cfg.Log}
	if err := mgr.Add(warm); err != nil {
		return fmt.Errorf("add cache warmer: %w", err)
	}
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		return store.Run(ctx, cfg.ConfigPoll)
	})); err != nil {
		return fmt.Errorf("add config watcher: %w", err)
	}
	if err := mgr.Add(templateRunner{mgr: mgr, store: store, log: cfg.Log.WithName("templates")}); err != nil {
		return fmt.Errorf("add aligned claim templates: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("healthz: %w", err)
	}
	// Ready only when the webhook answers TLS (certificates loaded) and the
	// namespace cache has synced.
	if err := mgr.AddReadyzCheck("webhook", srv.StartedChecker()); err != nil {
		return fmt.Errorf("readyz: %w", err)
	}
	if err := mgr.AddReadyzCheck("cache", warm.Checker); err != nil {
		return fmt.Errorf("readyz: %w", err)
	}
	return nil
}

// hardenTLS sets TLS 1.2 as the floor and turns HTTP/2 off (CVE-2023-44487,
// CVE-2023-39325: the API server speaks HTTP/1.1 to webhooks anyway).
func hardenTLS(c *tls.Config) {
	c.MinVersion = tls.VersionTLS12
	c.NextProtos = []string{"http/1.1"}
}

// gatedServer starts the webhook server once ready is closed (nil: at once),
// so self-managed certificates can be written first.
type gatedServer struct {
	srv   manager.Runnable
	ready <-chan struct{}
	log   logr.Logger
}

func (g gatedServer) Start(ctx context.Context) error {
	if g.ready != nil {
		g.log.Info("waiting for certificates before serving")
		select {
		case <-g.ready:
		case <-ctx.Done():
			return nil
		}
	}
	return g.srv.Start(ctx)
}

func (gatedServer) NeedLeaderElection() bool { return false }

// cacheWarmer starts the informers the handler reads from, so the first
// admission request does not wait for a list, and reports readiness once they
// have synced.
type cacheWarmer struct {
	cache    cache.Cache
	networks bool
	log      logr.Logger
	synced   atomic.Bool
}

func (w *cacheWarmer) Start(ctx context.Context) error {
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(handler.NamespaceGVK)
	if _, err := w.cache.GetInformer(ctx, ns); err != nil {
		return fmt.Errorf("namespace informer: %w", err)
	}
	if w.networks {
		nad := &metav1.PartialObjectMetadata{}
		nad.SetGroupVersionKind(handler.NetworkAttachmentDefinitionGVK)
		_, err := w.cache.GetInformer(ctx, nad)
		switch {
		case meta.IsNoMatchError(err):
			// Checked again per request: Multus may be installed later.
			w.log.Info("the cluster serves no NetworkAttachmentDefinitions; ipoib pods will be refused until it does")
		case err != nil:
			return fmt.Errorf("NetworkAttachmentDefinition informer: %w", err)
		}
	}
	if !w.cache.WaitForCacheSync(ctx) {
		return nil // ctx ended
	}
	w.synced.Store(true)
	w.log.Info("cache synced")
	return nil
}

func (*cacheWarmer) NeedLeaderElection() bool { return false }

// Checker is the readiness check.
func (w *cacheWarmer) Checker(*http.Request) error {
	if !w.synced.Load() {
		return errors.New("namespace cache not synced yet")
	}
	return nil
}
