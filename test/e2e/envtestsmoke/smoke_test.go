//go:build integration

// Package envtestsmoke checks that the envtest assets the project builds
// (make envtest-assets: kube-apiserver from the module proxy, Debian's etcd)
// start, serve and stop.
package envtestsmoke

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ibkube/ibkube/internal/testing/testenv"
)

func TestEnvtestAssetsStart(t *testing.T) {
	cfg, _ := testenv.Start(t, "envtest-smoke")
	cs := testenv.Clientset(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("server version: %v", err)
	}
	t.Logf("kube-apiserver %s", v.GitVersion)
	if v.GitVersion == "" || v.GitVersion == "v0.0.0-master" {
		t.Errorf("kube-apiserver reports version %q: the build lost its version stamp", v.GitVersion)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "smoke"}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
}
