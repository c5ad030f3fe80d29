// Package certs gives the webhook its serving certificate without
// cert-manager: open-policy-agent/cert-controller generates a CA and a
// serving certificate, keeps them in a Secret, writes the CA into the
// MutatingWebhookConfiguration's caBundle and rotates both before they
// expire; a small syncer copies tls.crt and tls.key from that Secret into
// --cert-dir, where controller-runtime's certificate watcher picks them up.
//
// With --cert-management=external the package does nothing: something else
// (cert-manager, a mounted Secret) puts the files into --cert-dir.
package certs

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Certificate management modes (--cert-management).
const (
	ManagementSelf     = "self"
	ManagementExternal = "external"
)

// Defaults match the chart installed as release "ibkube".
const (
	DefaultSecretName        = "ibkube-webhook-tls"
	DefaultWebhookConfigName = "ibkube"
	DefaultServiceName       = "ibkube-webhook"
	// DefaultSyncPeriod is how often the Secret is compared with the files
	// in the cert dir. A rotation reaches the files at most this late.
	DefaultSyncPeriod = 5 * time.Second
)

// Options configure certificate management.
type Options struct {
	// Management is ManagementSelf or ManagementExternal.
	Management string
	// SecretName is the Secret (in Namespace) holding ca.crt, ca.key,
	// tls.crt and tls.key. It must exist: the chart creates it empty, so the
	// webhook needs no right to create Secrets.
	SecretName string
	// WebhookConfigName is the MutatingWebhookConfiguration whose caBundle
	// is kept in step with the CA.
	WebhookConfigName string
	// ServiceName is the webhook's Service; the serving certificate is for
	// <service>.<namespace>.svc (and .svc.cluster.local).
	ServiceName string

	// Namespace of the Secret and the Service (the webhook's --namespace).
	Namespace string
	// CertDir receives tls.crt and tls.key (the webhook's --cert-dir).
	CertDir string
	// SyncPeriod: see DefaultSyncPeriod; 0 means the default.
	SyncPeriod time.Duration
	// Durations of the generated certificates and how long before expiry
	// they are renewed; 0 means cert-controller's defaults (CA 10 years,
	// serving certificate 1 year, renewal 90 days before expiry, checked
	// every 12 hours and whenever the Secret or the webhook configuration
	// changes).
	CADuration, ServerDuration, Lookahead, CheckFrequency time.Duration
}

// AddFlags registers --cert-management, --cert-secret-name,
// --webhook-config-name and --service-name, with the defaults above.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Management, "cert-management", ManagementSelf,
		"who provides the serving certificate: self (generate, store in --cert-secret-name, patch the caBundle of --webhook-config-name, rotate) or external (files placed in --cert-dir by cert-manager or a mounted Secret)")
	fs.StringVar(&o.SecretName, "cert-secret-name", DefaultSecretName,
		"with --cert-management=self: the Secret in --namespace that holds the CA and serving certificate (must exist)")
	fs.StringVar(&o.WebhookConfigName, "webhook-config-name", DefaultWebhookConfigName,
		"with --cert-management=self: the MutatingWebhookConfiguration whose caBundle is kept current")
	fs.StringVar(&o.ServiceName, "service-name", DefaultServiceName,
		"with --cert-management=self: the webhook's Service; the certificate is for <service>.<namespace>.svc")
}

// Validate checks the options; errors name the flag and what is accepted.
func (o Options) Validate() error {
	switch o.Management {
	case ManagementExternal:
		return nil
	case ManagementSelf:
	default:
		return fmt.Errorf("--cert-management %q: want self or external", o.Management)
	}
	var errs []error
	for _, f := range [...]struct{ flag, value string }{
		{"--cert-secret-name", o.SecretName},
		{"--webhook-config-name", o.WebhookConfigName},
	} {
		if msgs := validation.IsDNS1123Subdomain(f.value); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s %q: want a Kubernetes object name (DNS-1123 subdomain)", f.flag, f.value))
		}
	}
	if msgs := validation.IsDNS1035Label(o.ServiceName); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--service-name %q: want a Service name (DNS-1035 label)", o.ServiceName))
	}
	if o.Namespace == "" {
		errs = append(errs, errors.New("--namespace: the namespace of the certificate Secret and the Service is required with --cert-management=self"))
	}
	if o.CertDir == "" {
		errs = append(errs, errors.New("--cert-dir: a directory to write tls.crt and tls.key into is required with --cert-management=self"))
	}
	return errors.Join(errs...)
}

// DNSNames are the names the serving certificate is valid for; the first
// is the one the API server uses for a service reference.
func (o Options) DNSNames() []string {
	svc := o.ServiceName + "." + o.Namespace + ".svc"
	return []string{svc, svc + ".cluster.local"}
}

// Setup returns the function webhook/server calls before it starts serving
// (server.Config.CertSetup), or nil for external certificates. The function
// adds the rotator and the file syncer to mgr and returns a channel closed
// once the files are in the cert dir and the caBundle is injected.
func Setup(o Options, log logr.Logger) func(ctx context.Context, mgr manager.Manager) (<-chan struct{}, error) {
	if o.Management != ManagementSelf {
		return nil
	}
	return func(_ context.Context, mgr manager.Manager) (<-chan struct{}, error) {
		if err := o.Validate(); err != nil {
			return nil, err
		}
		// The rotator reads Secrets as typed objects through the manager's
		// scheme; the webhook's own scheme may hold metadata types only.
		if err := corev1.AddToScheme(mgr.GetScheme()); err != nil {
			return nil, fmt.Errorf("add core types to scheme: %w", err)
		}
		key := types.NamespacedName{Namespace: o.Namespace, Name: o.SecretName}
		names := o.DNSNames()
		ready := make(chan struct{})
		cr := &rotator.CertRotator{
			SecretKey:              key,
			CertDir:                o.CertDir,
			CAName:                 o.ServiceName + "-ca",
			CAOrganization:         "ibkube",
			DNSName:                names[0],
			ExtraDNSNames:          names[1:],
			IsReady:                ready,
			Webhooks:               []rotator.WebhookInfo{{Name: o.WebhookConfigName, Type: rotator.Mutating}},
			FieldOwner:             "ibkube-webhook",
			CaCertDuration:         o.CADuration,
			ServerCertDuration:     o.ServerDuration,
			LookaheadInterval:      o.Lookahead,
			RotationCheckFrequency: o.CheckFrequency,
		}
		if err := rotator.AddRotator(scopeToSecret(mgr, key.Namespace, key.Name), cr); err != nil {
			return nil, fmt.Errorf("add certificate rotator for secret %s: %w", key, err)
		}
		period := o.SyncPeriod
		if period <= 0 {
			period = DefaultSyncPeriod
		}
		syncer := &fileSync{reader: mgr.GetAPIReader(), key: key, dir: o.CertDir, period: period, log: log.WithName("certs")}
		if err := mgr.Add(syncer); err != nil {
			return nil, fmt.Errorf("add certificate file syncer: %w", err)
		}
		log.Info("self-managed certificates", "secret", key.String(), "webhookConfiguration", o.WebhookConfigName, "dnsNames", names, "certDir", o.CertDir)
		return ready, nil
	}
}
