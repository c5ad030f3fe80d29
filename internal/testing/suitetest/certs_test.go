package suitetest

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"testing"
)

// TestIssue: what a CA issues is a key pair crypto/tls loads, and a client
// trusting only the CA (new or parsed back from its PEM) accepts it for each
// name and address it was issued for and for no other.
func TestIssue(t *testing.T) {
	t.Parallel()
	ca := NewCA(t, "suitetest-ca")
	certPEM, keyPEM := ca.Issue(t, 7, []string{"svc.ns.svc"}, []net.IP{net.ParseIP("198.18.0.1")})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatalf("issued pair does not load: %v", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if leaf.SerialNumber.Int64() != 7 {
		t.Errorf("serial %v, want 7", leaf.SerialNumber)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca.PEM) {
		t.Fatal("the CA's PEM holds no certificate")
	}
	for name, want := range map[string]bool{"svc.ns.svc": true, "198.18.0.1": true, "other.ns.svc": false, "198.18.0.2": false} {
		_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name})
		if got := err == nil; got != want {
			t.Errorf("verify for %s: ok=%v (%v), want ok=%v", name, got, err, want)
		}
	}
}

// TestParseCA: a CA read back from a PKCS #8 key signs certificates that
// chain to it; PEM that is not a CA is refused.
func TestParseCA(t *testing.T) {
	t.Parallel()
	ca := NewCA(t, "suitetest-ca")
	keyDER, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := ParseCA(ca.PEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatalf("ParseCA: %v", err)
	}
	certPEM, keyPEM := parsed.Issue(t, 2, []string{"a.b.svc"}, nil)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := leaf.CheckSignatureFrom(ca.Cert); err != nil {
		t.Errorf("issued by the parsed CA, not signed by the CA: %v", err)
	}
	if _, err := ParseCA([]byte("not pem"), []byte("not pem")); err == nil {
		t.Error("ParseCA accepted text that is not PEM")
	}
}
