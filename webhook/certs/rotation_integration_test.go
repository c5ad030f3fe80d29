//go:build integration

package certs

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/ibkube/ibkube/internal/testing/testenv"
	"github.com/ibkube/ibkube/internal/testing/testrun"
)

const (
	testNamespace = "ibkube-system"
	testService   = "ibkube-webhook"
)

// TestSelfManagedCertificates runs the rotator and the file syncer against
// a real kube-apiserver, as the webhook does with the chart's defaults:
// bootstrap from the empty Secret, renewal of a serving certificate close
// to expiry (same CA, caBundle unchanged), and renewal of an expiring CA
// (new caBundle, new serving certificate), each reaching the cert dir.
func TestSelfManagedCertificates(t *testing.T) {
	cfg, _ := testenv.Start(t, "test-integration-certs")
	log := testr.New(t)
	ctrllog.SetLogger(log)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cs := testenv.Clientset(t, cfg)

	// What the chart creates: the namespace, the empty Secret, the webhook
	// configuration without a caBundle.
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Secrets(testNamespace).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: DefaultSecretName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	none := admissionv1.SideEffectClassNone
	mwc := &admissionv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: DefaultWebhookConfigName},
		Webhooks: []admissionv1.MutatingWebhook{{
			Name:                    "pods.infiniband.azure.com",
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             &none,
			ClientConfig: admissionv1.WebhookClientConfig{Service: &admissionv1.ServiceReference{
				Namespace: testNamespace, Name: testService, Path: ptr.To("/mutate-v1-pod"),
			}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"infiniband.azure.com/inject": "enabled"}},
		}},
	}
	mwcs := cs.AdmissionregistrationV1().MutatingWebhookConfigurations()
	if _, err := mwcs.Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// A manager like the webhook's: a scheme with metadata types only.
	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	mgr, err := manager.New(cfg, manager.Options{
		Scheme:                 scheme,
		Logger:                 log,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	certDir := filepath.Join(t.TempDir(), "serving-certs")
	opts := Options{
		Management: ManagementSelf, SecretName: DefaultSecretName, WebhookConfigName: DefaultWebhookConfigName,
		ServiceName: testService, Namespace: testNamespace, CertDir: certDir, SyncPeriod: 200 * time.Millisecond,
	}
	ready, err := Setup(opts, log)(ctx, mgr)
	if err != nil {
		t.Fatal(err)
	}
	run := testrun.Start(ctx, t, "manager", mgr.Start)

	run.WaitFor(t, ready, 90*time.Second, "certificates ready")

	secretNow := func() *corev1.Secret {
		t.Helper()
		s, err := cs.CoreV1().Secrets(testNamespace).Get(ctx, DefaultSecretName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	caBundleNow := func() []byte {
		t.Helper()
		m, err := mwcs.Get(ctx, DefaultWebhookConfigName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return m.Webhooks[0].ClientConfig.CABundle
	}
	// waitFor polls until cond holds, then checks the invariants a serving
	// webhook needs: the files equal the Secret, the served certificate
	// verifies for the Service's DNS name against the caBundle the API
	// server uses, and is good for at least minValid.
	waitFor := func(what string, minValid time.Duration, cond func(s *corev1.Secret) bool) *corev1.Secret {
		t.Helper()
		var s *corev1.Secret
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
			s = secretNow()
			if !cond(s) {
				return false, nil
			}
			crt, _ := os.ReadFile(filepath.Join(certDir, CertFile))
			key, _ := os.ReadFile(filepath.Join(certDir, KeyFile))
			return bytes.Equal(crt, s.Data[CertFile]) && bytes.Equal(key, s.Data[KeyFile]) &&
				bytes.Equal(caBundleNow(), s.Data["ca.crt"]), nil
		})
		if err != nil {
			t.Fatalf("%s: files, Secret and caBundle never agreed: %v", what, err)
		}
		crt, _ := os.ReadFile(filepath.Join(certDir, CertFile))
		leaf := parseCert(t, crt)
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caBundleNow()) {
			t.Fatalf("%s: caBundle holds no certificate", what)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: testService + "." + testNamespace + ".svc", Roots: pool}); err != nil {
			t.Errorf("%s: served certificate does not verify against the caBundle: %v", what, err)
		}
		if left := time.Until(leaf.NotAfter); left < minValid {
			t.Errorf("%s: served certificate expires in %v, want at least %v", what, left, minValid)
		}
		return s
	}

	// 1. Bootstrap: the empty Secret is filled and the caBundle injected.
	first := waitFor("bootstrap", 300*24*time.Hour, func(s *corev1.Secret) bool { return len(s.Data[CertFile]) > 0 })

	// 2. A serving certificate inside the renewal window (expires in an
	// hour) is replaced by a fresh one from the same CA.
	ca := parseCert(t, first.Data["ca.crt"])
	caKey := parseKey(t, first.Data["ca.key"])
	shortCrt, shortKey := issue(t, ca, caKey, time.Hour, testService+"."+testNamespace+".svc")
	s := first.DeepCopy()
	s.Data[CertFile], s.Data[KeyFile] = shortCrt, shortKey
	if _, err := cs.CoreV1().Secrets(testNamespace).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	renewed := waitFor("serving certificate renewal", 300*24*time.Hour, func(s *corev1.Secret) bool {
		return len(s.Data[CertFile]) > 0 && !bytes.Equal(s.Data[CertFile], shortCrt) && !bytes.Equal(s.Data[CertFile], first.Data[CertFile])
	})
	if !bytes.Equal(renewed.Data["ca.crt"], first.Data["ca.crt"]) {
		t.Error("serving certificate renewal replaced the CA; it should keep it")
	}

	// 3. A CA inside the renewal window is replaced, and with it the
	// caBundle and the serving certificate.
	oldCA, oldCAKey := selfSignedCA(t, time.Hour)
	oldCrt, oldKey := issue(t, parseCert(t, oldCA), parseKey(t, oldCAKey), time.Hour, testService+"."+testNamespace+".svc")
	s = renewed.DeepCopy()
	s.Data["ca.crt"], s.Data["ca.key"], s.Data[CertFile], s.Data[KeyFile] = oldCA, oldCAKey, oldCrt, oldKey
	if _, err := cs.CoreV1().Secrets(testNamespace).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rotated := waitFor("CA renewal", 300*24*time.Hour, func(s *corev1.Secret) bool {
		return len(s.Data["ca.crt"]) > 0 && !bytes.Equal(s.Data["ca.crt"], oldCA) && !bytes.Equal(s.Data["ca.crt"], renewed.Data["ca.crt"])
	})
	if time.Until(parseCert(t, rotated.Data["ca.crt"]).NotAfter) < 5*365*24*time.Hour {
		t.Error("renewed CA is short-lived")
	}
	t.Logf("caBundle now %s…", base64.StdEncoding.EncodeToString(caBundleNow())[:24])
}

func parseCert(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatalf("no PEM certificate in %q", data)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func parseKey(t *testing.T, data []byte) *rsa.PrivateKey {
	t.Helper()
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatal("no PEM key")
	}
	k, err := x509.ParsePKCS1PrivateKey(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func encode(t *testing.T, der []byte, key *rsa.PrivateKey) ([]byte, []byte) {
	t.Helper()
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
}

func selfSignedCA(t *testing.T, life time.Duration) ([]byte, []byte) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: testService + "-ca"},
		DNSNames:  []string{testService + "-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(life),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return encode(t, der, key)
}

func issue(t *testing.T, ca *x509.Certificate, caKey *rsa.PrivateKey, life time.Duration, dns string) ([]byte, []byte) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(8), Subject: pkix.Name{CommonName: dns}, DNSNames: []string{dns},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(life),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return encode(t, der, key)
}
