//go:build integration

package chart

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/ibkube/ibkube/internal/testing/testenv"
	"github.com/ibkube/ibkube/internal/testing/testrun"
	"github.com/ibkube/ibkube/webhook/certs"
)

// impersonate returns cfg acting as the ServiceAccount ns/name.
func impersonate(cfg *rest.Config, ns, name string) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ns + ":" + name,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}
	return c
}

// TestAPIServerRBAC installs manifests/ibkube.yaml for real and checks that
// the ServiceAccounts can do what the binaries do, with nothing more: the
// webhook's self-managed certificates bootstrap under the webhook's own
// identity, and a few things it must not do are forbidden.
func TestAPIServerRBAC(t *testing.T) {
	cfg := startAPIServer(t)
	c := newCluster(t, cfg)
	admin := c.cs
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c.installManifests(ctx, t)

	webhookCfg := impersonate(cfg, namespace, "ibkube-webhook")
	webhook, webhookDyn := testenv.Clients(t, webhookCfg)

	t.Run("webhook reads namespaces and NADs", func(t *testing.T) {
		if _, err := webhook.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
			t.Error(err)
		}
		if _, err := webhook.CoreV1().Namespaces().Watch(ctx, metav1.ListOptions{}); err != nil {
			t.Error(err)
		}
		nads := schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1", Resource: "network-attachment-definitions"}
		if _, err := webhookDyn.Resource(nads).List(ctx, metav1.ListOptions{}); err != nil {
			t.Error(err)
		}
	})

	t.Run("webhook bootstraps its certificates with its own rights", func(t *testing.T) {
		log := testr.New(t)
		ctrllog.SetLogger(log)
		scheme := runtime.NewScheme()
		if err := metav1.AddMetaToScheme(scheme); err != nil {
			t.Fatal(err)
		}
		mgr, err := manager.New(webhookCfg, manager.Options{Scheme: scheme, Logger: log,
			Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
		if err != nil {
			t.Fatal(err)
		}
		opts := certs.Options{Management: certs.ManagementSelf, SecretName: "ibkube-webhook-tls", WebhookConfigName: "ibkube",
			ServiceName: "ibkube-webhook", Namespace: namespace, CertDir: filepath.Join(t.TempDir(), "certs"), SyncPeriod: 200 * time.Millisecond}
		ready, err := certs.Setup(opts, log)(ctx, mgr)
		if err != nil {
			t.Fatal(err)
		}
		run := testrun.Start(ctx, t, "manager", mgr.Start)
		run.WaitFor(t, ready, 90*time.Second, "certificates ready under the webhook's RBAC")
		mwc, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "ibkube", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(mwc.Webhooks[0].ClientConfig.CABundle) == 0 {
			t.Error("caBundle not injected")
		}
	})

	t.Run("webhook cannot touch other secrets or webhook configurations", func(t *testing.T) {
		// Another Secret in the release namespace: invisible to the webhook.
		other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "registry-credentials", Namespace: namespace}}
		if _, err := admin.CoreV1().Secrets(namespace).Create(ctx, other, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := webhook.CoreV1().Secrets(namespace).Get(ctx, other.Name, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("get another secret in %s: %v, want forbidden", namespace, err)
		}
		if _, err := webhook.CoreV1().Secrets(namespace).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("list every secret in %s: %v, want forbidden", namespace, err)
		}
		if _, err := webhook.CoreV1().Secrets(namespace).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + other.Name}); !apierrors.IsForbidden(err) {
			t.Errorf("watch another secret in %s: %v, want forbidden", namespace, err)
		}
		// Its own, by name: what the rotator and the file syncer do.
		if _, err := webhook.CoreV1().Secrets(namespace).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=ibkube-webhook-tls"}); err != nil {
			t.Errorf("list its own secret by name: %v", err)
		}
		if _, err := webhook.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("list secrets in default: %v, want forbidden", err)
		}
		if _, err := webhook.CoreV1().Secrets(namespace).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("create a secret: %v, want forbidden", err)
		}
		if err := webhook.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, "ibkube", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("delete the webhook configuration: %v, want forbidden", err)
		}
		if _, err := webhook.CoreV1().Pods("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("list pods: %v, want forbidden", err)
		}
	})

	t.Run("agent reads its node and records events", func(t *testing.T) {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "nd-0", Labels: map[string]string{"node.kubernetes.io/instance-type": "Standard_ND96isr_H100_v5"}}}
		if _, err := admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		agent := testenv.Clientset(t, impersonate(cfg, namespace, "ibkube-node-agent"))
		if _, err := agent.CoreV1().Nodes().Get(ctx, "nd-0", metav1.GetOptions{}); err != nil {
			t.Error(err)
		}
		ev := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: "p.memlock", Namespace: "default"},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "p"},
			Reason:         "MemlockClamped", Message: "m", Type: corev1.EventTypeWarning,
			Source: corev1.EventSource{Component: "ibkube-node-agent", Host: "nd-0"},
		}
		if _, err := agent.CoreV1().Events("default").Create(ctx, ev, metav1.CreateOptions{}); err != nil {
			t.Error(err)
		}
		if _, err := agent.CoreV1().Secrets(namespace).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("agent lists secrets: %v, want forbidden", err)
		}
		if _, err := agent.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("agent updates a node: %v, want forbidden", err)
		}
	})
}
