// Package embedetcd runs a single-member etcd inside the process, on
// loopback, for the embedded default (sandbox-dev) and its tests. It owns
// the etcd data directory it is given and its certificate directory
// (Options.PKIDir), and nothing else.
//
// Security: the client and peer ports serve TLS only and require a client
// certificate signed by the member's own CA (self-signed, generated into
// PKIDir, keys 0600): a process on the host that cannot read PKIDir cannot
// talk to etcd, loopback or not. Etcd.ClientTLS names the files a client
// needs.
package embedetcd

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Etcd is a running embedded etcd.
type Etcd struct {
	// Endpoints are the client URLs ("https://127.0.0.1:port").
	Endpoints []string
	// ClientTLS are the CA and the client certificate and key to reach
	// Endpoints with; a client without that certificate is refused.
	ClientTLS TLSFiles
	e         *embed.Etcd
	closeOnce sync.Once
}

// Options configure Start.
type Options struct {
	// Dir holds etcd's data; a restart on the same Dir keeps every key.
	Dir string
	// ClientPort is the loopback client port; 0 picks a free one.
	ClientPort int
	// PKIDir holds the CA, server and client certificates; default
	// Dir + "-pki". Kept across restarts (regenerated when incomplete or
	// about to expire).
	PKIDir string
	// ReadyTimeout bounds the wait for the member to serve; default 30s.
	ReadyTimeout time.Duration
}

// Start starts etcd and waits until it serves clients.
func Start(opts Options) (*Etcd, error) {
	if opts.Dir == "" {
		return nil, errors.New("embedetcd: Dir is required")
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 30 * time.Second
	}
	if opts.PKIDir == "" {
		opts.PKIDir = filepath.Clean(opts.Dir) + "-pki"
	}
	certs, err := ensurePKI(opts.PKIDir)
	if err != nil {
		return nil, fmt.Errorf("embedetcd: certificates: %w", err)
	}
	clientPort := opts.ClientPort
	if clientPort == 0 {
		if clientPort, err = freePort(); err != nil {
			return nil, err
		}
	}
	peerPort, err := freePort()
	if err != nil {
		return nil, err
	}
	cu := url.URL{Scheme: "https", Host: fmt.Sprintf("127.0.0.1:%d", clientPort)}
	pu := url.URL{Scheme: "https", Host: fmt.Sprintf("127.0.0.1:%d", peerPort)}
	tlsInfo := transport.TLSInfo{
		CertFile:       certs.serverCert,
		KeyFile:        certs.serverKey,
		TrustedCAFile:  certs.ca,
		ClientCertAuth: true,
	}

	cfg := embed.NewConfig()
	cfg.Name = "hearth"
	cfg.Dir = opts.Dir
	cfg.ListenClientUrls = []url.URL{cu}
	cfg.AdvertiseClientUrls = []url.URL{cu}
	cfg.ListenPeerUrls = []url.URL{pu}
	cfg.AdvertisePeerUrls = []url.URL{pu}
	cfg.ClientTLSInfo = tlsInfo
	cfg.PeerTLSInfo = tlsInfo
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ListenMetricsUrls = nil
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	// The watch cache asks etcd for progress notifications to serve
	// consistent reads from memory.
	cfg.WatchProgressNotifyInterval = 5 * time.Second

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("embedetcd: start: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedetcd: %w", err)
	case <-time.After(opts.ReadyTimeout):
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("embedetcd: not ready after %s", opts.ReadyTimeout)
	}
	return &Etcd{Endpoints: []string{cu.String()}, ClientTLS: certs.client, e: e}, nil
}

// Err reports a fatal etcd error after Start.
func (e *Etcd) Err() <-chan error { return e.e.Err() }

// Close stops etcd; it is safe to call more than once.
func (e *Etcd) Close() {
	if e == nil || e.e == nil {
		return
	}
	e.closeOnce.Do(e.e.Close)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
