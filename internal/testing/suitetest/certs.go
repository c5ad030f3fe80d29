// Package suitetest holds what the suites under test/ (e2e, fleet,
// integration) share, so each does not carry its own copy: a CA that issues
// the serving certificates of the webhooks they start, and the reading of
// the scheduler's verdict on a pod.
package suitetest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"testing"
	"time"
)

// CA signs serving certificates; PEM is its certificate, the caBundle a
// client trusts.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	PEM  []byte
}

// NewCA makes a self-signed P-256 CA named cn.
func NewCA(t testing.TB, cn string) *CA {
	t.Helper()
	der, key := sign(t, &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}, nil)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// ParseCA reads a CA certificate and its PKCS #8 key from PEM, the form a
// kubeadm-style pki directory (ca.crt, ca.key) keeps them in.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, fmt.Errorf("CA certificate or key is not PEM")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	key, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("CA key is a %T, which cannot sign", key)
	}
	return &CA{Cert: cert, Key: signer, PEM: certPEM}, nil
}

// Issue makes a P-256 key and a serving certificate of it for dnsNames and
// ips with serial, signed by ca. It returns both in PEM, the certificate
// first: tls.crt and tls.key.
func (ca *CA) Issue(t testing.TB, serial int64, dnsNames []string, ips []net.IP) (certPEM, keyPEM []byte) {
	t.Helper()
	var cn string
	if len(dnsNames) > 0 {
		cn = dnsNames[0]
	} else if len(ips) > 0 {
		cn = ips[0].String()
	}
	der, key := sign(t, &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn}, DNSNames: dnsNames, IPAddresses: ips,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca)
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// sign makes a P-256 key and a certificate of it from tmpl, valid from an
// hour ago for a day, signed by parent (self-signed when parent is nil).
func sign(t testing.TB, tmpl *x509.Certificate, parent *CA) ([]byte, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	parentCert, parentKey := tmpl, crypto.Signer(key)
	if parent != nil {
		parentCert, parentKey = parent.Cert, parent.Key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parentCert, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}
