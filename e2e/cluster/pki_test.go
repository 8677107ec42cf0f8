package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"testing"
)

func TestPKI_ServingAndClientChains(t *testing.T) {
	ca, err := NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCA("other-ca")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.Serving("svc", "sandbox-apiserver.sandbox-system.svc", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.X509KeyPair(srv.CertPEM, srv.KeyPEM); err != nil {
		t.Fatalf("serving pair unusable: %v", err)
	}
	leaf := parse(t, srv.CertPEM)
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	for _, name := range []string{"sandbox-apiserver.sandbox-system.svc", "127.0.0.1"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name}); err != nil {
			t.Errorf("verify %s: %v", name, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "evil.example"}); err == nil {
		t.Error("serving cert valid for a name it does not carry")
	}
	otherRoots := x509.NewCertPool()
	otherRoots.AddCert(other.Cert)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: otherRoots, DNSName: "127.0.0.1"}); err == nil {
		t.Error("serving cert verifies under an unrelated CA")
	}

	cl, err := ca.Client("front-proxy-client", "g1")
	if err != nil {
		t.Fatal(err)
	}
	c := parse(t, cl.CertPEM)
	if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client cert: %v", err)
	}
	if c.Subject.CommonName != "front-proxy-client" || len(c.Subject.Organization) != 1 || c.Subject.Organization[0] != "g1" {
		t.Errorf("client subject = %v", c.Subject)
	}
	if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("client cert usable for serving")
	}
}

func parse(t *testing.T, p []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(p)
	if b == nil {
		t.Fatal("no PEM")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
