// Package testenv starts envtest's kube-apiserver and etcd for the
// integration suites (test/chart, test/integration/webhook, webhook/certs),
// so they start, stop and find CRDs the same way. Only tests import it.
package testenv

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Start runs envtest with the CRDs at crdPaths (files or directories; none:
// a cluster without Multus, cert-manager or the Prometheus operator) and
// stops it when the test ends. makeTarget is the make target that builds the
// binaries and sets $KUBEBUILDER_ASSETS, named when it is unset.
func Start(t testing.TB, makeTarget string, crdPaths ...string) (*rest.Config, *envtest.Environment) {
	t.Helper()
	env := &envtest.Environment{
		CRDDirectoryPaths:     crdPaths,
		ErrorIfCRDPathMissing: true,
	}
	return StartEnv(t, makeTarget, env), env
}

// StartEnv starts env, set up by the caller (an API server flag, say), and
// stops it when the test ends; makeTarget as for Start.
func StartEnv(t testing.TB, makeTarget string, env *envtest.Environment) *rest.Config {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatalf("$KUBEBUILDER_ASSETS is not set: run `make %s`, which builds kube-apiserver and sets it", makeTarget)
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start envtest: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop envtest: %v", err)
		}
	})
	return cfg
}

// AdminKubeconfig writes a kubeconfig of user, a system:masters user of
// env, for a binary the test runs against it (helm, kube-scheduler), and
// returns its path.
func AdminKubeconfig(t testing.TB, env *envtest.Environment, user string) string {
	t.Helper()
	u, err := env.AddUser(envtest.User{Name: user, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatalf("envtest user %s: %v", user, err)
	}
	kc, err := u.KubeConfig()
	if err != nil {
		t.Fatalf("kubeconfig of envtest user %s: %v", user, err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// NADCRD is the NetworkAttachmentDefinition CRD file in the NAD client
// module, read where Go keeps the module rather than copied into the repo.
func NADCRD(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/k8snetworkplumbingwg/network-attachment-definition-client").Output()
	if err != nil {
		t.Fatalf("locate the NAD client module: %v", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "artifacts", "networks-crd.yaml")
}

// Clientset builds the typed client of cfg.
func Clientset(t testing.TB, cfg *rest.Config) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// CreateNode creates the Node name, which the node agent's DRA driver
// publishes its ResourceSlices for and owns them by.
func CreateNode(ctx context.Context, t testing.TB, cs kubernetes.Interface, name string) {
	t.Helper()
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create node %s: %v", name, err)
	}
}

// Clients builds the typed and the dynamic client of cfg.
func Clients(t testing.TB, cfg *rest.Config) (*kubernetes.Clientset, dynamic.Interface) {
	t.Helper()
	cs := Clientset(t, cfg)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs, dyn
}

// Eventually polls cond until it returns nil, failing the test with cond's
// last error once timeout has passed: the timeout only bounds a failure.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %s: %v", what, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
