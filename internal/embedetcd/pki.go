package embedetcd

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// TLSFiles are the PEM files a client needs to reach the member: its CA
// (to verify the server) and a client certificate and key that CA signed.
type TLSFiles struct {
	CAFile, CertFile, KeyFile string
}

// pki is the member's certificate material under one directory: a
// self-signed CA, a serving certificate (also the peer certificate) for
// 127.0.0.1/localhost and one client certificate.
type pki struct {
	ca, serverCert, serverKey string
	client                    TLSFiles
}

func pkiIn(dir string) pki {
	return pki{
		ca:         filepath.Join(dir, "ca.crt"),
		serverCert: filepath.Join(dir, "server.crt"),
		serverKey:  filepath.Join(dir, "server.key"),
		client: TLSFiles{
			CAFile:   filepath.Join(dir, "ca.crt"),
			CertFile: filepath.Join(dir, "client.crt"),
			KeyFile:  filepath.Join(dir, "client.key"),
		},
	}
}

// certValidity is how long generated certificates last; a data directory
// older than that gets new ones at the next start (see ensurePKI).
const certValidity = 5 * 365 * 24 * time.Hour

// ensurePKI keeps the material in dir when every file exists and the
// certificates are still valid for a day, and generates all of it anew
// otherwise. Keys are 0600, the directory 0700.
func ensurePKI(dir string) (pki, error) {
	p := pkiIn(dir)
	if p.valid(24 * time.Hour) {
		return p, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return p, err
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, err
	}
	sn, err := serial()
	if err != nil {
		return p, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: "hearth-embedded-etcd-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return p, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return p, err
	}
	issue := func(cn string, usage []x509.ExtKeyUsage, server bool, certPath, keyPath string) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		sn, err := serial()
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: sn,
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(certValidity),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  usage,
		}
		if server {
			tmpl.DNSNames = []string{"localhost"}
			tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		kb, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return err
		}
		if err := writePEM(keyPath, "EC PRIVATE KEY", kb, 0o600); err != nil {
			return err
		}
		return writePEM(certPath, "CERTIFICATE", der, 0o644)
	}
	// The serving certificate is also the peer certificate, hence both usages.
	if err := issue("hearth-embedded-etcd", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, true, p.serverCert, p.serverKey); err != nil {
		return p, err
	}
	if err := issue("hearth-embedded-etcd-client", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, false, p.client.CertFile, p.client.KeyFile); err != nil {
		return p, err
	}
	// The CA last: its presence with valid leaves marks a complete set.
	return p, writePEM(p.ca, "CERTIFICATE", caDER, 0o644)
}

// valid reports whether every file exists and each certificate is valid
// for at least margin more.
func (p pki) valid(margin time.Duration) bool {
	for _, f := range []string{p.serverKey, p.client.KeyFile} {
		if _, err := os.Stat(f); err != nil {
			return false
		}
	}
	for _, f := range []string{p.ca, p.serverCert, p.client.CertFile} {
		b, err := os.ReadFile(f)
		if err != nil {
			return false
		}
		blk, _ := pem.Decode(b)
		if blk == nil {
			return false
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil || time.Now().Add(margin).After(c.NotAfter) {
			return false
		}
	}
	return true
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	b := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if b == nil {
		return errors.New("embedetcd: PEM encoding failed")
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
