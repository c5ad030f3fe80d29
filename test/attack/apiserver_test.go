//go:build integration

package attack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/internal/testing/charttest"
	"github.com/ibkube/ibkube/internal/testing/floods"
	"github.com/ibkube/ibkube/internal/testing/testenv"
	"github.com/ibkube/ibkube/webhook/handler"
)

// apiServer is the way in for attacks through envtest's kube-apiserver:
// pod creates, which it sends to the webhook under the chart's own
// MutatingWebhookConfiguration (failurePolicy Fail, timeoutSeconds 5).
type apiServer struct {
	cs  *kubernetes.Clientset
	mwc *admissionregistrationv1.MutatingWebhookConfiguration
	// failures holds the last message of each failed create's status code.
	failures sync.Map
}

// logFailures logs, and forgets, what failed creates were answered.
func (a *apiServer) logFailures(t *testing.T) {
	a.failures.Range(func(code, msg any) bool {
		t.Logf("create answered %d: %.300s", code, msg)
		a.failures.Delete(code)
		return true
	})
}

// newAPIServer is a client of cfg fast enough for the attack and the
// legitimate stream together, with the chart's webhook configuration
// trusting the certificate in certDir.
func newAPIServer(t *testing.T, cfg *rest.Config, certDir string) *apiServer {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 1000, 1000
	objs, err := charttest.Defaults()
	if err != nil {
		t.Fatal(err)
	}
	o, err := charttest.Find(objs, "MutatingWebhookConfiguration", "ibkube")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := json.Unmarshal(raw, mwc); err != nil {
		t.Fatalf("the chart's MutatingWebhookConfiguration: %v", err)
	}
	ca, err := os.ReadFile(filepath.Join(certDir, "tls.crt"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range mwc.Webhooks {
		mwc.Webhooks[i].ClientConfig.CABundle = ca
	}
	return &apiServer{cs: testenv.Clientset(t, cfg), mwc: mwc}
}

// point makes the API server call the webhook at addr, and waits until it
// does.
func (a *apiServer) point(t *testing.T, addr string) {
	t.Helper()
	url := "https://" + addr + handler.Path
	for i := range a.mwc.Webhooks {
		a.mwc.Webhooks[i].ClientConfig.Service, a.mwc.Webhooks[i].ClientConfig.URL = nil, &url
	}
	ctx := context.Background()
	client := a.cs.AdmissionregistrationV1().MutatingWebhookConfigurations()
	current, err := client.Get(ctx, a.mwc.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = client.Create(ctx, a.mwc, metav1.CreateOptions{})
	case err == nil:
		a.mwc.ResourceVersion = current.ResourceVersion
		_, err = client.Update(ctx, a.mwc, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatalf("point the webhook configuration at %s: %v", addr, err)
	}
	// The API server picks a configuration up asynchronously; a probe
	// pod mutated proves the new address is called (the old one is gone).
	testenv.Eventually(t, time.Minute, "the webhook called through the API server", func() error {
		if !a.legitimate(ctx) {
			return errors.New("probe pod not mutated yet")
		}
		return nil
	})
}

// legitimate creates (dry run) the benchmark's 8-GPU worker through the API
// server, within the API server's own timeout for a call, and says whether
// it came back mutated.
func (a *apiServer) legitimate(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*apiServerTimeout)
	defer cancel()
	var pod corev1.Pod
	if err := json.Unmarshal(workerPod(), &pod); err != nil {
		panic(err)
	}
	got, err := a.cs.CoreV1().Pods("training").Create(ctx, &pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return false
	}
	_, injected := got.Annotations[contract.AnnotationInjected]
	return injected
}

// create posts a pod object (JSON) as a dry-run create and returns the
// API server's status code.
func (a *apiServer) create(ctx context.Context, pod []byte) int {
	var code int
	err := a.cs.CoreV1().RESTClient().Post().Namespace("training").Resource("pods").Param("dryRun", metav1.DryRunAll).
		SetHeader("Content-Type", "application/json").Body(pod).Do(ctx).StatusCode(&code).Error()
	if err != nil {
		a.failures.Store(code, err.Error())
	}
	return code
}

// apiServerPod is a pod create as a client sends it: one container and n
// volumes given only a name, each of which the API server defaults to an
// emptyDir before the webhook sees it (12 bytes of the create become 26 of
// the review).
func apiServerPod(n int) []byte {
	pod := floods.Pod(true, "lists", `"containers":[{"name":"c","image":"busybox"}],"volumes":[`, `{"name":"v"}`, n, "]")
	return append([]byte(`{"apiVersion":"v1","kind":"Pod",`), pod[1:]...)
}

// creates is n clients each creating pod through the API server in a loop
// until ctx ends; each create runs to its answer (the API server spends
// seconds on a pod of a hundred thousand volumes before it calls the
// webhook), and is counted.
func (a *apiServer) creates(n int, pod []byte) func(context.Context, *webhook, *stats) {
	return func(ctx context.Context, _ *webhook, s *stats) {
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				for ctx.Err() == nil {
					one, cancel := context.WithTimeout(context.Background(), time.Minute)
					s.saw(a.create(one, pod), 0)
					cancel()
				}
			})
		}
		wg.Wait()
	}
}

// runThrough is the legitimate stream as pod creates through the API
// server at perSecond, each counted answered when it comes back mutated.
func (l *legit) runThrough(ctx context.Context, a *apiServer, perSecond int) *sync.WaitGroup {
	return paced(ctx, perSecond, func() {
		start := time.Now()
		l.record(a.legitimate(context.Background()), time.Since(start))
	})
}

// apiServerAttacks are the attacks sent as pod creates through the API
// server: its body limit (3 MiB) and its defaulting shape what reaches the
// webhook.
func apiServerAttacks(a *apiServer) []attack {
	const volumes = 150_000
	return []attack{
		{name: "through the API server: none (legitimate creates only)",
			run: func(ctx context.Context, _ *webhook, _ *stats) { <-ctx.Done() }},
		{name: fmt.Sprintf("through the API server: 4 concurrent creates of %dk named volumes (%.2f MB, %.2f MB as reviewed), ibkube's", volumes/1000,
			float64(len(apiServerPod(volumes)))/1e6, float64(volumes*len(`{"name":"v","emptyDir":{}},`))/1e6),
			run: a.creates(4, apiServerPod(volumes))},
	}
}
