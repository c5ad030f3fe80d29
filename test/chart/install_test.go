//go:build integration

package chart

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ibkube/ibkube/internal/testing/charttest"
	"github.com/ibkube/ibkube/internal/testing/testenv"
)

// TestAPIServerHelmInstall runs `helm install` and `helm upgrade` against a
// real API server that has no Multus, cert-manager or Prometheus operator:
// the chart must install cleanly there, print its NOTES, and an upgrade
// must keep the certificates the webhook wrote into its Secret.
func TestAPIServerHelmInstall(t *testing.T) {
	cfg, env := startEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kubeconfig := testenv.AdminKubeconfig(t, env, "helm-admin")
	helmKube := func(args ...string) string {
		t.Helper()
		out, err := helm(t, append(args, "--kubeconfig", kubeconfig)...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	out := helmKube("install", release, charttest.ChartDir(), "--namespace", namespace, "--create-namespace")
	t.Log(out)
	for _, want := range []string{
		"kubectl label namespace <ns> infiniband.azure.com/inject=enabled",
		"infiniband.azure.com/mode=rdma-shared",
		"failurePolicy is Fail",
		"install Multus and upgrade the release",
		// Kubernetes 1.37 serves resource.k8s.io/v1: the DRA agent is there for relabelled nodes.
		"kubectl label node <node> infiniband.azure.com/allocation=dra",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("install NOTES lack %q:\n%s", want, out)
		}
	}

	cs := testenv.Clientset(t, cfg)
	// What the webhook's rotator does after start.
	secret, err := cs.CoreV1().Secrets(namespace).Get(ctx, "ibkube-webhook-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret.Data = map[string][]byte{"ca.crt": []byte("ca"), "ca.key": []byte("k"), "tls.crt": []byte("c"), "tls.key": []byte("k")}
	if _, err := cs.CoreV1().Secrets(namespace).Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	mwc, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "ibkube", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mwc.Webhooks[0].ClientConfig.CABundle = []byte("ca")
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, mwc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	helmKube("upgrade", release, charttest.ChartDir(), "--namespace", namespace, "--set", "webhook.replicas=3")
	secret, err = cs.CoreV1().Secrets(namespace).Get(ctx, "ibkube-webhook-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(secret.Data["tls.crt"]) != "c" || string(secret.Data["ca.key"]) != "k" {
		t.Errorf("helm upgrade wiped the webhook's certificates: secret data %v", secret.Data)
	}
	mwc, err = cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "ibkube", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(mwc.Webhooks[0].ClientConfig.CABundle) != "ca" {
		t.Errorf("helm upgrade wiped the injected caBundle (%q): the webhook would be unreachable until the rotator reinjects it", mwc.Webhooks[0].ClientConfig.CABundle)
	}
	dep, err := cs.AppsV1().Deployments(namespace).Get(ctx, "ibkube-webhook", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *dep.Spec.Replicas != 3 {
		t.Errorf("upgrade did not apply: replicas %d", *dep.Spec.Replicas)
	}
	// envtest runs no Job controller: the pre-delete hook that takes the
	// partition labels off the Nodes would never complete.
	helmKube("uninstall", release, "--namespace", namespace, "--no-hooks")
}
