// Package envd is Hearth's in-guest agent: the subset of e2b's envd API the
// e2b SDK uses (Connect-JSON process and filesystem services, /files,
// /health), served inside every microVM (and, for the sim backend, as the
// guest process itself).
//
// It owns the guest's processes and files under Options.Root and nothing on
// the host side. Every request except GET /health must carry the sandbox
// token in X-Access-Token when Options.Token is set.
package envd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Version is the envd version advertised to the e2b SDK.
const Version = "0.5.7"

// Options configure the agent.
type Options struct {
	// Listen is the address to bind; default 127.0.0.1:0.
	Listen string
	// AddrFile, when set, receives the bound host:port once listening.
	AddrFile string
	// Token is the required X-Access-Token; empty disables the check.
	Token string
	// Root is the guest's home and default working directory.
	Root string
	// Env is added to every process the agent starts.
	Env map[string]string
}

// NewHandler returns the agent's HTTP handler.
func NewHandler(o Options) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}

// Run serves the agent until ctx ends.
func Run(ctx context.Context, o Options) error {
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return err
	}
	if o.AddrFile != "" {
		tmp := o.AddrFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(ln.Addr().String()), 0o600); err != nil {
			return err
		}
		if err := os.Rename(tmp, o.AddrFile); err != nil {
			return err
		}
	}
	srv := &http.Server{Handler: NewHandler(o), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Main is cmd/sandbox-agent: it parses args and runs until SIGTERM/SIGINT.
func Main(args []string) int {
	fs := flag.NewFlagSet("sandbox-agent", flag.ContinueOnError)
	var o Options
	var env string
	fs.StringVar(&o.Listen, "listen", "127.0.0.1:0", "address to serve on")
	fs.StringVar(&o.AddrFile, "addr-file", "", "file to write the bound address to")
	fs.StringVar(&o.Root, "root", "", "guest home directory (default: current directory)")
	fs.StringVar(&env, "env", "", "comma-separated KEY=VALUE pairs added to every process")
	tokenFile := fs.String("token-file", "", "file holding the access token (default: $HEARTH_AGENT_TOKEN)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	o.Token = os.Getenv("HEARTH_AGENT_TOKEN")
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "sandbox-agent:", err)
			return 1
		}
		o.Token = strings.TrimSpace(string(b))
	}
	if o.Root == "" {
		o.Root, _ = os.Getwd()
	}
	o.Root, _ = filepath.Abs(o.Root)
	if env != "" {
		o.Env = map[string]string{}
		for _, kv := range strings.Split(env, ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				o.Env[k] = v
			}
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := Run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-agent:", err)
		return 1
	}
	return 0
}
