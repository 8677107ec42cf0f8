package e2b

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	certutil "k8s.io/client-go/util/cert"
)

// wildcardCert writes a self-signed certificate for *.domain and domain
// (and its key) into dir and returns their paths and a pool trusting it.
func wildcardCert(t *testing.T, dir, domain string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	cert, key, err := certutil.GenerateSelfSignedCertKey(domain, nil, []string{"*." + domain})
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, cert, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	if !pool.AppendCertsFromPEM(cert) {
		t.Fatal("no certificate in the generated PEM")
	}
	return certFile, keyFile, pool
}

// With --e2b-tls-cert-file/--e2b-tls-key-file the gateway serves TLS with
// the wildcard certificate: the control plane on the domain and a
// host-routed sandbox port on <port>-<id>.<domain> both verify, and plain
// HTTP on the same port gets no answer.
func TestOptions_TLSServesTheWildcardCertificate(t *testing.T) {
	cert, key, pool := wildcardCert(t, t.TempDir(), "hearth.test")
	o := NewOptions()
	o.AllowAnonymous, o.Domain, o.TLSCertFile, o.TLSKeyFile, o.BindAddress = true, "hearth.test", cert, key, "127.0.0.1:0"
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg, err := o.Config(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TLS == nil {
		t.Fatal("Config has no TLS with a certificate configured")
	}
	ln, err := Listen(o.BindAddress, cfg.TLS)
	if err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, port, ok := HostRoute(r.Host, "hearth.test")
		if ok {
			_, _ = io.WriteString(w, id+":"+port)
			return
		}
		_, _ = io.WriteString(w, "control plane")
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeListener(ctx, ln, h) }()
	t.Cleanup(func() { cancel(); <-done })
	addr := ln.Addr().String()

	for _, tc := range []struct{ host, want string }{
		{"hearth.test", "control plane"},
		{"8000-sb-0123456789abcdef.hearth.test", "sb-0123456789abcdef:8000"},
	} {
		client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: tc.host},
		}}
		req, _ := http.NewRequest(http.MethodGet, "https://"+addr+"/", nil)
		req.Host = tc.host
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s over TLS: %v", tc.host, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != tc.want {
			t.Fatalf("%s: got %q, want %q", tc.host, b, tc.want)
		}
	}
	plain := &http.Client{Timeout: 5 * time.Second}
	if resp, err := plain.Get("http://" + addr + "/"); err == nil && resp.StatusCode == http.StatusOK {
		resp.Body.Close()
		t.Fatal("plain HTTP was answered 200 on the TLS port")
	} else if err == nil {
		resp.Body.Close()
	}
}

func TestOptions_TLSCertAndKeyGoTogether(t *testing.T) {
	for _, tc := range []struct{ cert, key string }{{"c.pem", ""}, {"", "k.pem"}} {
		o := NewOptions()
		o.AllowAnonymous, o.TLSCertFile, o.TLSKeyFile = true, tc.cert, tc.key
		if err := o.Validate(); err == nil {
			t.Fatalf("cert %q key %q: Validate accepted half a TLS pair", tc.cert, tc.key)
		}
	}
	o := NewOptions()
	o.AllowAnonymous, o.TLSCertFile, o.TLSKeyFile = true, "/nonexistent/c.pem", "/nonexistent/k.pem"
	if _, err := o.Config(nil); err == nil {
		t.Fatal("Config accepted an unreadable certificate")
	}
}
