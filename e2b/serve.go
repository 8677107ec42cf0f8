package e2b

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/hearthvm/hearth/internal/serve"
)

// Validate reports flag errors that need no I/O: no key file and no
// --e2b-allow-anonymous is ErrNoKeys; a TLS certificate without its key (or
// the reverse) is an error.
func (o *Options) Validate() error {
	if o.APIKeyFile == "" && !o.AllowAnonymous {
		return ErrNoKeys
	}
	if o.BindAddress == "" {
		return errors.New("--e2b-bind-address is required")
	}
	if (o.TLSCertFile == "") != (o.TLSKeyFile == "") {
		return errors.New("--e2b-tls-cert-file and --e2b-tls-key-file go together")
	}
	return nil
}

// ServerTLS is the gateway's TLS configuration for one certificate:
// TLS 1.2 or later, HTTP/1.1 (the data plane proxies HTTP/1.1 and
// WebSocket upgrades).
func ServerTLS(cert tls.Certificate) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
}

// Listen opens the gateway's listener on addr: TLS when cfg.TLS is set,
// else plain TCP.
func Listen(addr string, cfg *tls.Config) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if cfg != nil {
		ln = tls.NewListener(ln, cfg)
	}
	return ln, nil
}

// Serve serves h on addr until ctx ends, then shuts down gracefully (10 s).
// ready, when not nil, receives the bound address.
func Serve(ctx context.Context, addr string, h http.Handler, ready func(net.Addr)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	if ready != nil {
		ready(ln.Addr())
	}
	return ServeListener(ctx, ln, h)
}

// ServeOptions are the gateway's timeouts: every request gets
// serve.DefaultTimeouts' read and write deadlines; the data plane (envd
// traffic) lifts them (serve.Unbound) once its token is checked, and streams
// for as long as it lasts. Its connections draw from the process's budget
// (serve.Shared), with the API server's in the same process.
var ServeOptions = serve.Options{Timeouts: serve.DefaultTimeouts}

// ServeListener serves h on ln until ctx ends, then shuts down gracefully
// (10 s). It closes ln. Clients are bounded by ServeOptions.
func ServeListener(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := serve.NewServer(h, ServeOptions)
	ln = serve.Listen(ln, ServeOptions)
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	err := srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		<-done
		return nil
	}
	return err
}
