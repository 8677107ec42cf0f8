// Package envd is Hearth's in-guest agent: the subset of e2b's envd API the
// e2b SDK uses, served inside every microVM (and, for the sim backend, as the
// guest process itself). Wire protocol: Connect with the JSON codec over
// HTTP/1.1 — process.Process/{Start,Connect} (server streams: start, data,
// keepalive, end, end-of-stream frame), process.Process/{List,SendSignal,
// SendInput,CloseStdin} and filesystem.Filesystem/{Stat,MakeDir,ListDir,
// Remove,Move} (unary) — plus REST GET/POST /files, POST /init
// ({"envVars":{...}} for later processes; the node posts claim-time env
// there) and GET /health (204).
//
// Every request except GET /health must carry the sandbox token in
// X-Access-Token when Options.Token is set (401 otherwise).
//
// Guest paths: absolute paths are used as they are; relative ones resolve
// against Options.Root, the guest user's home (also HOME and the default
// working directory of processes). Inside a microVM that is the guest's own
// file system. The sim backend runs the agent as a host process, not in a
// chroot, so there absolute paths are real host paths.
//
// The agent owns the processes it starts (killed when Run returns) and
// nothing on the host side.
package envd

import (
	"context"
	"crypto/subtle"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Version is the envd version advertised to the e2b SDK: octet-stream
// uploads work (>= 0.5.7) and X-Metadata file metadata does not (< 0.6.2),
// so the SDK refuses metadata writes locally instead of losing them.
const Version = "0.5.7"

// Options configure the agent.
type Options struct {
	// Listen is the address to bind; default 127.0.0.1:0.
	Listen string
	// AddrFile, when set, receives the bound host:port once listening.
	AddrFile string
	// Token is the required X-Access-Token; empty disables the check.
	Token string
	// Root is the guest's home and default working directory; relative
	// guest paths resolve against it and processes get HOME=Root.
	Root string
	// Env is added to every process the agent starts.
	Env map[string]string
	// KeepaliveInterval is the longest silence on a process stream before a
	// keepalive event (default 30s; a shorter Keepalive-Ping-Interval wins).
	KeepaliveInterval time.Duration
}

// agent is the handler's state: the /init env vars and the running processes.
type agent struct {
	o       Options
	mux     *http.ServeMux
	mu      sync.Mutex
	initEnv map[string]string
	procs   map[int]*process
	closed  bool
}

// NewHandler returns the agent's HTTP handler. Processes it starts live
// until they exit; Run kills the remaining ones when it returns.
func NewHandler(o Options) http.Handler { return newAgent(o) }

func newAgent(o Options) *agent {
	if o.Root == "" {
		o.Root, _ = os.Getwd()
	}
	o.Root, _ = filepath.Abs(o.Root)
	a := &agent{o: o, mux: http.NewServeMux(), initEnv: map[string]string{}, procs: map[int]*process{}}
	m := a.mux
	m.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	m.HandleFunc("POST /init", a.handleInit)
	m.HandleFunc("POST "+IdentityPath, a.handleIdentity)
	m.HandleFunc("GET /files", a.handleGetFile)
	m.HandleFunc("POST /files", a.handlePostFile)
	m.HandleFunc("POST /process.Process/Start", a.handleStart)
	m.HandleFunc("POST /process.Process/Connect", a.handleConnect)
	m.HandleFunc("POST /process.Process/List", a.handleList)
	m.HandleFunc("POST /process.Process/SendSignal", a.handleSendSignal)
	m.HandleFunc("POST /process.Process/SendInput", a.handleSendInput)
	m.HandleFunc("POST /process.Process/CloseStdin", a.handleCloseStdin)
	m.HandleFunc("POST /filesystem.Filesystem/Stat", a.handleStat)
	m.HandleFunc("POST /filesystem.Filesystem/MakeDir", a.handleMakeDir)
	m.HandleFunc("POST /filesystem.Filesystem/ListDir", a.handleListDir)
	m.HandleFunc("POST /filesystem.Filesystem/Remove", a.handleRemove)
	m.HandleFunc("POST /filesystem.Filesystem/Move", a.handleMove)
	return a
}

// ServeHTTP checks X-Access-Token (all but GET /health) and dispatches.
func (a *agent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if tok := a.token(); tok != "" && !(r.Method == http.MethodGet && r.URL.Path == "/health") {
		got := r.Header.Get("X-Access-Token")
		if subtle.ConstantTimeCompare([]byte(got), []byte(tok)) != 1 {
			if strings.HasPrefix(r.URL.Path, "/process.") || strings.HasPrefix(r.URL.Path, "/filesystem.") {
				writeUnaryError(w, errorf(codeUnauthenticated, "missing or invalid X-Access-Token"))
				return
			}
			writeRESTError(w, http.StatusUnauthorized, "missing or invalid X-Access-Token")
			return
		}
	}
	a.mux.ServeHTTP(w, r)
}

// Run serves the agent until ctx ends.
func Run(ctx context.Context, o Options) error {
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	if o.Root != "" {
		if err := os.MkdirAll(o.Root, 0o755); err != nil {
			return err
		}
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
	a := newAgent(o)
	defer a.killAll()
	srv := &http.Server{Handler: a, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		a.killAll()
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
