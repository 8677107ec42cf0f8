package embedetcd_test

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hearthvm/hearth/internal/embedetcd"
)

func put(endpoint string, tlsCfg *tls.Config) error {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 2 * time.Second, TLS: tlsCfg})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = c.Put(ctx, "k", "v")
	return err
}

// Only a client holding the member's client certificate gets in: not a
// plain-TCP client on loopback, not a TLS client without a certificate.
func TestStart_RefusesClientsWithoutItsCertificate(t *testing.T) {
	dir := t.TempDir()
	e, err := embedetcd.Start(embedetcd.Options{Dir: filepath.Join(dir, "etcd")})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ep := e.Endpoints[0]
	if !strings.HasPrefix(ep, "https://127.0.0.1:") {
		t.Fatalf("endpoint %s", ep)
	}
	if err := put(strings.Replace(ep, "https://", "http://", 1), nil); err == nil {
		t.Fatal("a plain client on loopback was served")
	}
	ca, err := (transport.TLSInfo{TrustedCAFile: e.ClientTLS.CAFile}).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := put(ep, ca); err == nil {
		t.Fatal("a TLS client without a client certificate was served")
	}
	full, err := (transport.TLSInfo{TrustedCAFile: e.ClientTLS.CAFile, CertFile: e.ClientTLS.CertFile, KeyFile: e.ClientTLS.KeyFile}).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := put(ep, full); err != nil {
		t.Fatalf("with the client certificate: %v", err)
	}
	for _, f := range []string{e.ClientTLS.KeyFile, filepath.Join(dir, "etcd-pki", "server.key")} {
		st, err := os.Stat(f)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", f, st.Mode(), err)
		}
	}
	// A restart on the same directories keeps the certificates.
	before, _ := os.ReadFile(e.ClientTLS.CAFile)
	e.Close()
	e2, err := embedetcd.Start(embedetcd.Options{Dir: filepath.Join(dir, "etcd")})
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	after, _ := os.ReadFile(e2.ClientTLS.CAFile)
	if string(before) != string(after) {
		t.Fatal("CA regenerated on restart")
	}
	if err := put(e2.Endpoints[0], full); err != nil {
		t.Fatalf("after restart: %v", err)
	}
}
