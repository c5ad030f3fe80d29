//go:build integration

// Package webhook runs ibkube-webhook's server in-process against a real
// kube-apiserver and etcd (envtest), behind the MutatingWebhookConfiguration
// the project ships in manifests/ibkube.yaml, and checks what the API server
// stores.
package webhook

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/yaml"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/internal/testing/configmapdir"
	"github.com/ibkube/ibkube/internal/testing/errtest"
	"github.com/ibkube/ibkube/internal/testing/freeport"
	"github.com/ibkube/ibkube/internal/testing/suitetest"
	"github.com/ibkube/ibkube/internal/testing/testenv"
	"github.com/ibkube/ibkube/internal/testing/testrun"
	"github.com/ibkube/ibkube/webhook/handler"
	"github.com/ibkube/ibkube/webhook/mutate"
	"github.com/ibkube/ibkube/webhook/server"
)

const manifestsFile = "../../../manifests/ibkube.yaml"

// warnings collects the Warning headers the API server returns.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, msg)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.msgs
	w.msgs = nil
	return m
}

// shippedWebhookConfig loads the MutatingWebhookConfiguration from the
// rendered chart. It is never written by hand here: the test must exercise what
// users install.
func shippedWebhookConfig(t *testing.T) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	data, err := os.ReadFile(manifestsFile)
	if err != nil {
		t.Fatalf("the shipped manifests are what this test checks: %v (render them from charts/ibkube with make manifests)", err)
	}
	dec := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := dec.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", manifestsFile, err)
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil || meta.Kind != "MutatingWebhookConfiguration" {
			continue
		}
		var mwc admissionregistrationv1.MutatingWebhookConfiguration
		if err := yaml.UnmarshalStrict(doc, &mwc); err != nil {
			t.Fatalf("%s: MutatingWebhookConfiguration: %v", manifestsFile, err)
		}
		return &mwc
	}
	t.Fatalf("%s has no MutatingWebhookConfiguration", manifestsFile)
	return nil
}

// issue writes tls.crt and tls.key for 127.0.0.1 with the given serial
// into dir, each replaced atomically as a rotating Secret mount would.
func issue(t *testing.T, ca *suitetest.CA, dir string, serial int64) {
	t.Helper()
	crt, key := ca.Issue(t, serial, nil, []net.IP{net.IPv4(127, 0, 0, 1)})
	write := func(name string, b []byte) {
		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	write("tls.key", key)
	write("tls.crt", crt)
}

// servedSerial is the serial of the certificate the webhook presents.
func servedSerial(port int) (int64, error) {
	c, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64(), nil
}

func httpGet(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// getOK is nil when url answers 200, else what it answered.
func getOK(url string) error {
	code, body, err := httpGet(url)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("HTTP %d: %s", code, body)
	}
	return nil
}

// env is what every subtest uses.
type env struct {
	cs      *kubernetes.Clientset
	dyn     dynamic.Interface
	warn    *warnings
	envtest *envtest.Environment
	release string
	metrics string
	cfgDir  *configmapdir.Dir
}

func pod(name string, annotations map[string]string, gpus int64) *corev1.Pod {
	res := corev1.ResourceRequirements{
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
	}
	if gpus > 0 {
		res.Limits["nvidia.com/gpu"] = *resource.NewQuantity(gpus, resource.DecimalSI)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{
				Name: "worker", Image: "registry.k8s.io/pause:3.10", Resources: res,
			}},
		},
	}
}

func (e *env) create(t *testing.T, ns string, p *corev1.Pod) (*corev1.Pod, []string, error) {
	t.Helper()
	e.warn.take()
	got, err := e.cs.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
	w := e.warn.take()
	if err != nil {
		return nil, w, err
	}
	stored, gerr := e.cs.CoreV1().Pods(ns).Get(context.Background(), got.Name, metav1.GetOptions{})
	if gerr != nil {
		t.Fatal(gerr)
	}
	return stored, w, nil
}

// admit creates p in ns, failing the test if it is refused, and returns
// the stored pod and the warnings.
func (e *env) admit(t *testing.T, ns string, p *corev1.Pod) (*corev1.Pod, []string) {
	t.Helper()
	got, w, err := e.create(t, ns, p)
	if err != nil {
		t.Fatalf("%s/%s refused: %v", ns, p.Name, err)
	}
	return got, w
}

func hasCap(c corev1.Container, capName corev1.Capability) bool {
	if c.SecurityContext == nil || c.SecurityContext.Capabilities == nil {
		return false
	}
	for _, a := range c.SecurityContext.Capabilities.Add {
		if a == capName {
			return true
		}
	}
	return false
}

func TestWebhook(t *testing.T) {
	mwc := shippedWebhookConfig(t)
	if len(mwc.Webhooks) != 1 || mwc.Webhooks[0].ClientConfig.Service == nil {
		t.Fatalf("shipped MutatingWebhookConfiguration: want one webhook with a service clientConfig, got %+v", mwc.Webhooks)
	}
	release := mwc.Webhooks[0].ClientConfig.Service.Namespace
	path := ptr.Deref(mwc.Webhooks[0].ClientConfig.Service.Path, "")
	if path != handler.Path {
		t.Fatalf("shipped webhook path %q, the server serves %q", path, handler.Path)
	}

	restCfg, te := testenv.Start(t, "test-integration-webhook")

	log := logr.FromSlogHandler(newTestLogHandler(t))
	ctrllog.SetLogger(log)
	certDir := t.TempDir()
	ca := suitetest.NewCA(t, "ibkube-test-ca")
	issue(t, ca, certDir, 2)
	caBundle := ca.PEM
	port, metricsPort, probePort := freeport.Port(t), freeport.Port(t), freeport.Port(t)
	cd := configmapdir.New(t.TempDir(), "webhook.yaml")

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- server.Run(ctx, server.Config{
			ConfigFile:             cd.Path(),
			CertDir:                certDir,
			Host:                   "127.0.0.1",
			Port:                   port,
			MetricsBindAddress:     fmt.Sprintf("127.0.0.1:%d", metricsPort),
			HealthProbeBindAddress: fmt.Sprintf("127.0.0.1:%d", probePort),
			ReleaseNamespace:       release,
			CheckNetworks:          true,
			Rest:                   rest.CopyConfig(restCfg),
			Log:                    log,
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("server.Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("server did not stop")
		}
	})
	testenv.Eventually(t, time.Minute, "readyz", func() error {
		select {
		case err := <-done:
			t.Fatalf("server.Run returned early: %v", err)
		default:
		}
		return getOK(fmt.Sprintf("http://127.0.0.1:%d/readyz", probePort))
	})

	warn := &warnings{}
	clientCfg := rest.CopyConfig(restCfg)
	clientCfg.WarningHandler = warn
	cs, _ := testenv.Clients(t, clientCfg)
	// The dynamic client's warnings are not the admission warnings checked.
	_, dyn := testenv.Clients(t, restCfg)
	e := &env{cs: cs, dyn: dyn, warn: warn, envtest: te, release: release,
		metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort), cfgDir: cd}

	bg := context.Background()
	for _, ns := range []corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "rdma", Labels: map[string]string{contract.LabelInject: contract.InjectEnabled}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "plain"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "baseline", Labels: map[string]string{
			contract.LabelInject: contract.InjectEnabled, "pod-security.kubernetes.io/enforce": "baseline"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: release, Labels: map[string]string{contract.LabelInject: contract.InjectEnabled}}},
	} {
		if _, err := cs.CoreV1().Namespaces().Create(bg, &ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// Install the shipped configuration, pointing it at this process.
	url := fmt.Sprintf("https://127.0.0.1:%d%s", port, handler.Path)
	mwc.Webhooks[0].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caBundle}
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(bg, mwc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("install the shipped MutatingWebhookConfiguration: %v", err)
	}
	// The API server picks the configuration up asynchronously.
	testenv.Eventually(t, time.Minute, "webhook in effect", func() error {
		p := pod("probe", map[string]string{contract.AnnotationMode: contract.ModeShared}, 0)
		got, err := cs.CoreV1().Pods("rdma").Create(bg, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return err
		}
		if _, ok := got.Annotations[contract.AnnotationInjected]; !ok {
			return errors.New("dry-run pod not mutated yet")
		}
		return nil
	})

	t.Run("TLS", func(t *testing.T) { testTLS(t, port) })
	t.Run("opted-in namespace", e.testOptedIn)
	t.Run("plain namespace", e.testPlain)
	t.Run("release namespace", e.testRelease)
	t.Run("baseline namespace", e.testBaseline)
	t.Run("refusals", e.testRefusals)
	t.Run("IPoIB network check", e.testNetworks)
	t.Run("config reload", e.testConfigReload)
	t.Run("metrics", e.testMetrics)
	t.Run("aligned claims", e.testAligned)
	t.Run("health probes", func(t *testing.T) {
		for _, path := range []string{"/healthz", "/readyz"} {
			if err := getOK(fmt.Sprintf("http://127.0.0.1:%d%s", probePort, path)); err != nil {
				t.Errorf("GET %s: %v, want 200", path, err)
			}
		}
	})
	t.Run("certificate rotation", func(t *testing.T) {
		issue(t, ca, certDir, 3)
		testenv.Eventually(t, 30*time.Second, "rotated certificate served", func() error {
			serial, err := servedSerial(port)
			if err != nil {
				return err
			}
			if serial != 3 {
				return fmt.Errorf("serving serial %d, want 3", serial)
			}
			return nil
		})
		// The API server still reaches the webhook through the new certificate.
		got, _ := e.admit(t, "rdma", pod("after-rotation", map[string]string{contract.AnnotationMode: contract.ModeShared}, 0))
		if _, ok := got.Annotations[contract.AnnotationInjected]; !ok {
			t.Error("pod not mutated after the certificate rotated")
		}
	})
}

func (e *env) testOptedIn(t *testing.T) {
	t.Run("rdma-shared", func(t *testing.T) {
		got, w := e.admit(t, "rdma", pod("shared", map[string]string{contract.AnnotationMode: contract.ModeShared}, 0))
		c := got.Spec.Containers[0]
		if q := c.Resources.Limits["rdma/shared_ib"]; q.Value() != 1 {
			t.Errorf("stored limits %v: want rdma/shared_ib: 1", c.Resources.Limits)
		}
		if !hasCap(c, "IPC_LOCK") {
			t.Errorf("stored container has no IPC_LOCK: %+v", c.SecurityContext)
		}
		if got.Annotations[contract.AnnotationMemlock] != "unlimited" {
			t.Errorf("memlock annotation = %q, want unlimited", got.Annotations[contract.AnnotationMemlock])
		}
		if !strings.Contains(got.Annotations[contract.AnnotationInjected], contract.ModeShared) {
			t.Errorf("status annotation %q does not name the mode", got.Annotations[contract.AnnotationInjected])
		}
		if len(w) != 0 {
			t.Errorf("unexpected warnings %q", w)
		}
	})
	t.Run("rdma-exclusive on 8 GPUs", func(t *testing.T) {
		got, _ := e.admit(t, "rdma", pod("exclusive", map[string]string{contract.AnnotationMode: contract.ModeExclusive}, 8))
		c := got.Spec.Containers[0]
		if q := c.Resources.Limits["rdma/ib"]; q.Value() != 8 {
			t.Errorf("stored limits %v: want rdma/ib: 8 (one HCA per GPU)", c.Resources.Limits)
		}
		if q := c.Resources.Limits["nvidia.com/gpu"]; q.Value() != 8 {
			t.Errorf("user's GPU limit changed: %v", c.Resources.Limits)
		}
	})
	t.Run("pod without annotation or GPU is not sent", func(t *testing.T) {
		before := e.admissions(t)
		got, _ := e.admit(t, "rdma", pod("cpu-only", nil, 0))
		if after := e.admissions(t); after != before {
			t.Errorf("the API server sent the pod to the webhook (%v admissions counted, then %v): the matchConditions should keep it away", before, after)
		}
		// The count does move for a pod that is sent: a GPU pod, which a
		// namespace default mode would apply to.
		e.admit(t, "rdma", pod("gpu-no-mode", nil, 8))
		if after := e.admissions(t); after != before+1 {
			t.Errorf("GPU pod: %v admissions counted, want %v", after, before+1)
		}
		if len(got.Annotations) != 0 || len(got.Spec.Containers[0].Resources.Limits) != 1 {
			t.Errorf("cpu-only pod changed: annotations %v limits %v", got.Annotations, got.Spec.Containers[0].Resources.Limits)
		}
	})
	t.Run("mode none opts out", func(t *testing.T) {
		got, _ := e.admit(t, "rdma", pod("opt-out", map[string]string{contract.AnnotationMode: contract.ModeNone}, 8))
		if _, ok := got.Annotations[contract.AnnotationInjected]; ok {
			t.Errorf("mode none pod was injected: %v", got.Annotations)
		}
	})
}

// admissions is the number of admission requests the webhook has counted,
// summed over ibkube_webhook_mutations_total's labels.
func (e *env) admissions(t *testing.T) float64 {
	t.Helper()
	_, body, err := httpGet(e.metrics)
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, "ibkube_webhook_mutations_total{") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		n += v
	}
	return n
}

func (e *env) testPlain(t *testing.T) {
	got, _ := e.admit(t, "plain", pod("shared", map[string]string{contract.AnnotationMode: contract.ModeShared}, 8))
	if _, ok := got.Spec.Containers[0].Resources.Limits["rdma/shared_ib"]; ok {
		t.Errorf("pod in a namespace that did not opt in was mutated: %v", got.Spec.Containers[0].Resources.Limits)
	}
	if len(got.Annotations) != 1 {
		t.Errorf("annotations changed: %v", got.Annotations)
	}
}

func (e *env) testRelease(t *testing.T) {
	got, _ := e.admit(t, e.release, pod("shared", map[string]string{contract.AnnotationMode: contract.ModeShared}, 8))
	if len(got.Annotations) != 1 || hasCap(got.Spec.Containers[0], "IPC_LOCK") {
		t.Errorf("pod in the release namespace %s was mutated: %v", e.release, got.Annotations)
	}
}

func (e *env) testBaseline(t *testing.T) {
	got, w, err := e.create(t, "baseline", pod("shared", map[string]string{contract.AnnotationMode: contract.ModeShared}, 8))
	if err != nil {
		t.Fatalf("pod refused in a baseline namespace (IPC_LOCK must be skipped there): %v", err)
	}
	c := got.Spec.Containers[0]
	if hasCap(c, "IPC_LOCK") {
		t.Errorf("IPC_LOCK added in a namespace enforcing baseline")
	}
	if q := c.Resources.Limits["rdma/shared_ib"]; q.Value() != 1 {
		t.Errorf("stored limits %v: want rdma/shared_ib: 1", c.Resources.Limits)
	}
	if !strings.Contains(strings.Join(w, "\n"), "IPC_LOCK") {
		t.Errorf("warnings %q: want one explaining why IPC_LOCK was skipped", w)
	}
}

func (e *env) testRefusals(t *testing.T) {
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		want        []string
	}{
		{"unknown mode", map[string]string{contract.AnnotationMode: "rdma-shard"}, []string{contract.AnnotationMode, "rdma-shard", "rdma-shared"}},
		{"bad hcas", map[string]string{contract.AnnotationMode: contract.ModeExclusive, contract.AnnotationHCAs: "eight"}, []string{contract.AnnotationHCAs, "eight"}},
		{"typo under the prefix", map[string]string{"infiniband.azure.com/moed": contract.ModeShared}, []string{"infiniband.azure.com/moed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := e.create(t, "rdma", pod("refused", tc.annotations, 0))
			errtest.Names(t, err, tc.want...)
		})
	}
	// One container over the work bound, through the API server: refused
	// with the count and the limit, as the webhook's own answer.
	t.Run("more containers than the limit", func(t *testing.T) {
		p := pod("wide", map[string]string{contract.AnnotationMode: contract.ModeShared}, 0)
		for i := len(p.Spec.Containers); i <= mutate.MaxContainers; i++ {
			c := *p.Spec.Containers[0].DeepCopy()
			c.Name = fmt.Sprintf("side-%d", i)
			p.Spec.Containers = append(p.Spec.Containers, c)
		}
		_, _, err := e.create(t, "rdma", p)
		want := fmt.Sprintf("pod has %d containers (containers, init containers and ephemeral containers together); accepted: at most %d", mutate.MaxContainers+1, mutate.MaxContainers)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "admission webhook") {
			t.Fatalf("a pod of %d containers: %v, want the webhook's refusal %q", mutate.MaxContainers+1, err, want)
		}
	})
}

var nadGVR = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1", Resource: "network-attachment-definitions"}

func (e *env) testNetworks(t *testing.T) {
	ipoib := func(name string) *corev1.Pod {
		return pod(name, map[string]string{contract.AnnotationMode: "rdma-shared,ipoib"}, 8)
	}
	nad := e.release + "/ibkube-ipoib"

	// 1. No NetworkAttachmentDefinition API at all (no Multus).
	_, _, err := e.create(t, "rdma", ipoib("no-crd"))
	if err == nil || !strings.Contains(err.Error(), "Multus/NAD CRD is missing") {
		t.Fatalf("without the NAD CRD: got %v, want a refusal saying the Multus/NAD CRD is missing", err)
	}
	// rdma-only pods do not need the network.
	if _, _, err := e.create(t, "rdma", pod("rdma-only", map[string]string{contract.AnnotationMode: contract.ModeShared}, 8)); err != nil {
		t.Fatalf("rdma-shared pod refused without the NAD CRD: %v", err)
	}

	// 2. CRD installed (from the NAD client module), NAD absent.
	crds, err := envtest.InstallCRDs(rest.CopyConfig(e.envtestConfig()), envtest.CRDInstallOptions{
		Paths: []string{testenv.NADCRD(t)}, ErrorIfPathMissing: true,
	})
	if err != nil || len(crds) != 1 {
		t.Fatalf("install NAD CRD: %v (%d CRDs)", err, len(crds))
	}
	testenv.Eventually(t, time.Minute, "refusal naming the missing NAD", func() error {
		_, _, err := e.create(t, "rdma", ipoib("no-nad"))
		if err == nil {
			return errors.New("pod admitted without its NetworkAttachmentDefinition")
		}
		for _, s := range []string{nad, "does not exist", "networks.ipoib.enabled=true"} {
			if !strings.Contains(err.Error(), s) {
				return fmt.Errorf("refusal %q does not mention %q", err, s)
			}
		}
		return nil
	})

	// 3. NAD present: admitted with the network merged in.
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
		"metadata": map[string]any{"name": "ibkube-ipoib", "namespace": e.release},
		"spec":     map[string]any{"config": `{"cniVersion":"1.0.0","type":"ipoib","master":"ib0"}`},
	}}
	if _, err := e.dyn.Resource(nadGVR).Namespace(e.release).Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, _, err := e.create(t, "rdma", ipoib("with-nad"))
	if err != nil {
		t.Fatalf("pod refused although %s exists: %v", nad, err)
	}
	if nets := got.Annotations["k8s.v1.cni.cncf.io/networks"]; !strings.Contains(nets, "ibkube-ipoib") {
		t.Errorf("networks annotation %q does not name the IPoIB network", nets)
	}
}

func (e *env) envtestConfig() *rest.Config { return e.envtest.Config }

func (e *env) testConfigReload(t *testing.T) {
	// A valid file: the shared resource of an NVIDIA Network Operator install.
	e.cfgDir.Write(t, "apiVersion: ibkube.io/v1alpha1\nkind: WebhookConfig\nresources:\n  shared: rdma/rdma_shared_device_a\n  exclusive: rdma/ib\n")
	n := 0
	testenv.Eventually(t, 30*time.Second, "new shared resource name", func() error {
		n++
		got, _, err := e.create(t, "rdma", pod(fmt.Sprintf("reload-%d", n), map[string]string{contract.AnnotationMode: contract.ModeShared}, 0))
		if err != nil {
			return err
		}
		if _, ok := got.Spec.Containers[0].Resources.Limits["rdma/rdma_shared_device_a"]; !ok {
			return fmt.Errorf("limits %v", got.Spec.Containers[0].Resources.Limits)
		}
		return nil
	})
	// A bad file keeps the last good config, and says so.
	e.cfgDir.Write(t, "apiVersion: ibkube.io/v1alpha1\nkind: WebhookConfig\nresources:\n  shard: rdma/typo\n")
	testenv.Eventually(t, 30*time.Second, "bad config reported", func() error {
		_, body, err := httpGet(e.metrics)
		if err != nil {
			return err
		}
		if !strings.Contains(body, "ibkube_webhook_config_last_reload_successful 0") {
			return errors.New("ibkube_webhook_config_last_reload_successful is not 0")
		}
		return nil
	})
	got, _ := e.admit(t, "rdma", pod("after-bad-config", map[string]string{contract.AnnotationMode: contract.ModeShared}, 0))
	if _, ok := got.Spec.Containers[0].Resources.Limits["rdma/rdma_shared_device_a"]; !ok {
		t.Errorf("after a bad config file the last good one must stay: limits %v", got.Spec.Containers[0].Resources.Limits)
	}
	// A file that disappears is a failed reload too, not a switch to defaults.
	e.cfgDir.Remove(t)
	testenv.Eventually(t, 30*time.Second, "vanished config reported", func() error {
		_, body, err := httpGet(e.metrics)
		if err != nil {
			return err
		}
		if !strings.Contains(body, `ibkube_webhook_config_reloads_total{result="failure"} 2`) {
			return errors.New(`ibkube_webhook_config_reloads_total{result="failure"} is not 2`)
		}
		return nil
	})
	got, _ = e.admit(t, "rdma", pod("after-vanished-config", map[string]string{contract.AnnotationMode: contract.ModeShared}, 0))
	if _, ok := got.Spec.Containers[0].Resources.Limits["rdma/rdma_shared_device_a"]; !ok {
		t.Errorf("after the config file vanished the last good one must stay: limits %v", got.Spec.Containers[0].Resources.Limits)
	}
}

func (e *env) testMetrics(t *testing.T) {
	_, body, err := httpGet(e.metrics)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`ibkube_webhook_mutations_total{mode="rdma-shared",outcome="injected"}`,
		`ibkube_webhook_mutations_total{mode="rdma-shared,ipoib",outcome="refused"}`,
		`ibkube_webhook_mutation_duration_seconds_bucket{outcome="injected"`,
		`ibkube_webhook_config_reloads_total{result="failure"}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
}

// testTLS checks the listener's TLS floor and that HTTP/2 is off.
func testTLS(t *testing.T, port int) {
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	// MinVersion too: Go clients refuse to offer anything below TLS 1.2 by
	// default, which would fail the handshake here whatever the server allows.
	old, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11})
	if err == nil {
		old.Close()
		t.Error("TLS 1.1 handshake succeeded, want TLS 1.2 at least")
	} else if !strings.Contains(err.Error(), "protocol version") {
		t.Errorf("TLS 1.1 handshake failed for another reason than the version floor: %v", err)
	}
	v12, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12})
	if err != nil {
		t.Errorf("TLS 1.2 handshake: %v (API servers may still speak TLS 1.2)", err)
	} else {
		v12.Close()
	}
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if p := c.ConnectionState().NegotiatedProtocol; p == "h2" {
		t.Error("HTTP/2 negotiated, want it off")
	}
}

// newTestLogHandler sends the server's logs to t.Log.
// Lines logged after the test ended (stray goroutines) are dropped.
func newTestLogHandler(t *testing.T) slog.Handler {
	w := &testWriter{t: t}
	t.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() })
	return slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo})
}

type testWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// TestCertSetupGatesReadiness: with a CertSetup hook (self-managed
// certificates), the webhook server waits for it and /readyz stays false until
// the certificates are written.
func TestCertSetupGatesReadiness(t *testing.T) {
	restCfg, _ := testenv.Start(t, "test-integration-webhook")
	certDir := t.TempDir()
	port, probePort := freeport.Port(t), freeport.Port(t)
	ready := make(chan struct{})
	setupCalled := make(chan struct{})
	run := testrun.Start(context.Background(), t, "server.Run", func(ctx context.Context) error {
		return server.Run(ctx, server.Config{
			ConfigFile:             filepath.Join(t.TempDir(), "absent.yaml"),
			CertDir:                certDir,
			Host:                   "127.0.0.1",
			Port:                   port,
			MetricsBindAddress:     "0",
			HealthProbeBindAddress: fmt.Sprintf("127.0.0.1:%d", probePort),
			ReleaseNamespace:       "ibkube-system",
			Rest:                   rest.CopyConfig(restCfg),
			Log:                    logr.FromSlogHandler(newTestLogHandler(t)),
			Registry:               prometheus.NewRegistry(),
			CertSetup: func(context.Context, manager.Manager) (<-chan struct{}, error) {
				close(setupCalled)
				return ready, nil
			},
		})
	})
	run.WaitFor(t, setupCalled, 30*time.Second, "CertSetup called")
	readyz := fmt.Sprintf("http://127.0.0.1:%d/readyz", probePort)
	// Wait for the cache check to pass (readyz lists every check when one
	// fails): from then on only the missing certificates hold readiness back.
	var code int
	var body string
	testenv.Eventually(t, 30*time.Second, "readyz cache check", func() error {
		var err error
		if code, body, err = httpGet(readyz + "?verbose"); err != nil {
			return err
		}
		if !strings.Contains(body, "[+]cache ok") {
			return fmt.Errorf("status %d: %s", code, body)
		}
		return nil
	})
	if code == http.StatusOK || !strings.Contains(body, "[-]webhook failed") {
		t.Fatalf("/readyz before any certificate exists: status %d, want the webhook check failing:\n%s", code, body)
	}
	if _, err := servedSerial(port); err == nil {
		t.Fatal("webhook port answers TLS before CertSetup said the certificates are there")
	}
	issue(t, suitetest.NewCA(t, "ibkube-test-ca"), certDir, 7)
	close(ready)
	testenv.Eventually(t, 30*time.Second, "readyz after certificates", func() error { return getOK(readyz) })
	if serial, err := servedSerial(port); err != nil || serial != 7 {
		t.Errorf("served serial %d (%v), want 7", serial, err)
	}
}
