// Package cluster runs a real Kubernetes control plane for the e2e suite:
// etcd and kube-apiserver (built by hack/setup.d/30-kube-binaries.sh) on
// loopback, with a PKI generated in Go, static-token users and the
// front-proxy (requestheader) setup an aggregated API server needs. There is
// no controller-manager, scheduler or kubelet: namespaces never finish
// deleting and Pods never run, so tests use unique names.
//
// Every process is a Proc stopped by PID; the caller stops the ControlPlane.
package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Static users the control plane knows by bearer token.
const (
	AdminToken = "hearth-e2e-admin" // user "admin", group system:masters
	BobToken   = "hearth-e2e-bob"   // user "bob", no grants
	BobUser    = "bob"
	AdminUser  = "admin"
)

// ControlPlane is a running etcd + kube-apiserver pair.
type ControlPlane struct {
	Dir          string // PKI, kubeconfigs, logs, etcd data
	CA           *CA    // cluster CA: kube-apiserver serving cert, client certs, caBundles
	FrontProxyCA *CA
	EtcdURL      string
	Server       string // https://127.0.0.1:<port>
	Admin        string // admin kubeconfig path

	Etcd, APIServer *Proc
}

// StartControlPlane generates the PKI under dir, starts etcd and
// kube-apiserver from binDir and waits until kube-apiserver's /readyz is ok.
// On error everything started is stopped.
func StartControlPlane(binDir, dir string) (cp *ControlPlane, err error) {
	cp = &ControlPlane{Dir: dir}
	defer func() {
		if err != nil {
			cp.Stop()
			cp = nil
		}
	}()
	for _, sub := range []string{"pki", "logs", "etcd"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return cp, err
		}
	}
	pki, logs := filepath.Join(dir, "pki"), filepath.Join(dir, "logs")
	if cp.CA, err = NewCA("hearth-e2e-ca"); err != nil {
		return cp, err
	}
	if cp.FrontProxyCA, err = NewCA("hearth-e2e-front-proxy-ca"); err != nil {
		return cp, err
	}
	caFile, fpCAFile := filepath.Join(pki, "ca.crt"), filepath.Join(pki, "front-proxy-ca.crt")
	if err := os.WriteFile(caFile, cp.CA.CertPEM, 0o600); err != nil {
		return cp, err
	}
	if err := os.WriteFile(fpCAFile, cp.FrontProxyCA.CertPEM, 0o600); err != nil {
		return cp, err
	}
	serving, err := cp.CA.Serving("kube-apiserver", "127.0.0.1", "localhost", "kubernetes",
		"kubernetes.default", "kubernetes.default.svc", "10.0.0.1")
	if err != nil {
		return cp, err
	}
	servingCrt, servingKey, err := serving.Write(pki, "apiserver")
	if err != nil {
		return cp, err
	}
	fp, err := cp.FrontProxyCA.Client("front-proxy-client")
	if err != nil {
		return cp, err
	}
	fpCrt, fpKey, err := fp.Write(pki, "front-proxy-client")
	if err != nil {
		return cp, err
	}
	saPub, saKey, err := ServiceAccountKeys(pki)
	if err != nil {
		return cp, err
	}
	tokens := filepath.Join(pki, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(fmt.Sprintf("%s,%s,admin-uid,system:masters\n%s,%s,bob-uid\n",
		AdminToken, AdminUser, BobToken, BobUser)), 0o600); err != nil {
		return cp, err
	}

	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = FreePort(); err != nil {
			return cp, err
		}
	}
	clientURL, peerURL := "http://"+Addr(ports[0]), "http://"+Addr(ports[1])
	cp.EtcdURL = clientURL
	cp.Etcd, err = Start("etcd", logs, filepath.Join(binDir, "etcd"), []string{
		"--name=e2e", "--data-dir=" + filepath.Join(dir, "etcd"),
		"--listen-client-urls=" + clientURL, "--advertise-client-urls=" + clientURL,
		"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=e2e=" + peerURL, "--log-level=warn",
		"--unsafe-no-fsync", // test data; the machine is shared and slow
	})
	if err != nil {
		return cp, err
	}
	if err := Poll(cp.Etcd, 60*time.Second, 100*time.Millisecond, httpOK(http.DefaultClient, clientURL+"/health")); err != nil {
		return cp, fmt.Errorf("etcd: %w", err)
	}

	cp.Server = "https://" + Addr(ports[2])
	cp.APIServer, err = Start("kube-apiserver", logs, filepath.Join(binDir, "kube-apiserver"), []string{
		"--etcd-servers=" + clientURL,
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", ports[2]), "--advertise-address=127.0.0.1",
		"--endpoint-reconciler-type=none",
		"--tls-cert-file=" + servingCrt, "--tls-private-key-file=" + servingKey,
		"--client-ca-file=" + caFile,
		"--token-auth-file=" + tokens,
		"--authorization-mode=RBAC",
		"--allow-privileged=true", // as kubeadm clusters do; the sandboxd DaemonSet needs /dev/kvm
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + saPub, "--service-account-signing-key-file=" + saKey,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--proxy-client-cert-file=" + fpCrt, "--proxy-client-key-file=" + fpKey,
		"--requestheader-client-ca-file=" + fpCAFile, "--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
	})
	if err != nil {
		return cp, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(cp.CA.Cert)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if err := Poll(cp.APIServer, 120*time.Second, 100*time.Millisecond, httpOK(hc, cp.Server+"/readyz")); err != nil {
		return cp, fmt.Errorf("kube-apiserver: %w", err)
	}
	cp.Admin = filepath.Join(dir, "admin.kubeconfig")
	return cp, cp.WriteKubeconfig(cp.Admin, AdminToken)
}

func httpOK(hc *http.Client, url string) func() (bool, error) {
	return func() (bool, error) {
		resp, err := hc.Get(url)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return true, nil
	}
}

// Stop stops kube-apiserver, then etcd, by PID. Safe on a partial start.
func (cp *ControlPlane) Stop() {
	if cp.APIServer != nil {
		cp.APIServer.Stop(15 * time.Second)
	}
	if cp.Etcd != nil {
		cp.Etcd.Stop(10 * time.Second)
	}
}

// Config is a client config for the bearer token.
func (cp *ControlPlane) Config(token string) *rest.Config {
	return &rest.Config{
		Host:            cp.Server,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.CA.CertPEM},
		QPS:             200, Burst: 400,
	}
}

// WriteKubeconfig writes a kubeconfig for the bearer token to path.
func (cp *ControlPlane) WriteKubeconfig(path, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: cp.Server, CertificateAuthorityData: cp.CA.CertPEM}
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "user", Namespace: "default"}
	cfg.CurrentContext = "e2e"
	return clientcmd.WriteToFile(*cfg, path)
}

// ErrNoBinaries means the control plane binaries are not built.
var ErrNoBinaries = errors.New("control plane binaries missing: run hack/setup.d/30-kube-binaries.sh")

// CheckBinaries reports ErrNoBinaries unless binDir holds etcd and
// kube-apiserver.
func CheckBinaries(binDir string) error {
	var missing []string
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if st, err := os.Stat(filepath.Join(binDir, b)); err != nil || st.Mode()&0o111 == 0 {
			missing = append(missing, filepath.Join(binDir, b))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w (%s)", ErrNoBinaries, strings.Join(missing, ", "))
	}
	return nil
}
