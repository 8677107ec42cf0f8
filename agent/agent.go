// Package agent is Hearth's in-guest agent: the subset of e2b's envd API the
// e2b SDK uses, served inside every microVM (and, for the sim backend, as the
// sandbox's first guest process). Wire protocol: Connect with the JSON codec over
// HTTP/1.1 — process.Process/{Start,Connect} (server streams: start, data,
// keepalive, end, end-of-stream frame; a process may run on a pty, see
// pty.go), process.Process/{List,SendSignal,SendInput,CloseStdin,Update}
// and filesystem.Filesystem/{Stat,MakeDir,ListDir,Remove,Move} (unary),
// filesystem.Filesystem/WatchDir (stream) and the polled watchers (see
// watch.go) — plus REST GET/POST /files (X-Metadata file metadata, see
// xattr.go), POST /init ({"envVars":{...}} for later processes; the node
// posts claim-time env there) and GET /health (204). Environment given at
// start (--env-file, a JSON object; --env, comma-separated pairs whose
// values hold no comma) and through /init is added to every process.
//
// Every request except GET /health must carry the sandbox token in
// X-Access-Token when Options.Token is set (401 otherwise), or be a /files
// request signed with it (agentapi.VerifyFileSignature). A request
// carrying agentapi.ForwardPortHeader (a valid port) may carry instead the
// forward-only credential agentapi.ForwardToken(token) in
// agentapi.ForwardTokenHeader, which opens that forward and never the
// agent's own routes: the e2b gateway sends it for requests it admitted to
// a guest port only (a public port, the traffic token, a router port
// forward), so such a request cannot reach the agent's API even if its
// forward header were lost on the way. On port agentapi.InterpreterPort,
// which the agent serves itself and where code runs, it opens only the
// interpreter's context calls and /health, never POST /execute (401),
// which needs the sandbox token. A forwarded request reaches the guest
// without any X-Hearth-* header or X-Access-Token. A request carrying
// agentapi.ForwardPortHeader is forwarded to that port of the guest —
// except port agentapi.InterpreterPort (49999), which the agent answers
// itself: e2b's code interpreter API (POST /execute, /contexts) over
// python3 processes running an embedded standard-library driver, python
// only, no Jupyter, IPython, charts or other languages (interpreter.go;
// unless Options.NoInterpreter).
//
// The wire the rest of Hearth speaks to the agent — its ports, headers and
// internal paths, the /init and re-key bodies, the signed-URL and
// forward-credential checks — is package agentapi's, which links nothing of
// this package: only the agent and cmd/sandbox-agent link it
// (internal/deps checks).
//
// Guest paths: absolute paths are used as they are; relative ones and "~"
// resolve, as envd's do, against the home of the request's user — the one
// /files names in ?username=, else the one the SDK names in Authorization:
// Basic (never for a signed URL used without the token: the signature does
// not cover it), else Options.User — or Options.Root when that user has no home
// directory (also the default working directory of processes). What a
// request creates belongs to that user (owner.go). Inside a microVM that is the guest's own
// file system; under the sim backend it is the sandbox's own root (an
// overlay of the template, see vmm/sim), never the host's.
//
// The agent keeps the sandbox log (log.go): a record in its memory,
// bounded to agentapi.MaxLogBytes (newest kept, lines cut at
// agentapi.MaxLogLine), of the processes started through the API (command
// line, exit status), each line they write to stdout and stderr (not a
// terminal's output) and its own errors — never a process's environment.
// GET agentapi.LogsPath serves it to the node; with follow=true it streams
// each entry as it is written (logfollow.go).
//
// GET agentapi.OOMKillsPath serves the node the guest kernel's OOM kill
// count, from /proc/vmstat (oom.go).
//
// Started held (Options.Hold, --hold), the agent answers the node at once
// — GET /health and the paths under agentapi.InternalPathPrefix — and
// holds every other request (envd's, /files, /init, the runtime API, the
// code interpreter, every port forward) until the node opens it with POST
// agentapi.OpenPath, at most 30 s each, then 503 (hold.go). The node
// boots the VMs of a lane whose egress policy it enforces held and opens
// one once its claim's policy is in: no request of the sandbox runs
// before.
//
// The agent owns the processes it starts (killed when Run returns) and
// nothing on the host side.
package agent

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/internal/osthread"
	"github.com/hearthvm/hearth/internal/serve"
)

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
	// TokenFile, when set, is where an identity change (POST
	// /hearth/identity) persists the new token, so a restarted agent that
	// reads it again keeps the current identity.
	TokenFile string
	// User is the account processes run as when a request names none
	// (the e2b SDK names one in Authorization: Basic); empty means the
	// agent's own. Switching needs the agent to run as root.
	User string
	// Env is added to every process the agent starts.
	Env map[string]string
	// KeepaliveInterval is the longest silence on a process stream before a
	// keepalive event (default 30s; a shorter Keepalive-Ping-Interval wins).
	KeepaliveInterval time.Duration
	// Python is the interpreter code contexts run (interpreter.go;
	// default "python3" on PATH).
	Python string
	// MaxCodeContexts bounds the code contexts (default 16).
	MaxCodeContexts int
	// NoInterpreter leaves port agentapi.InterpreterPort to the guest: forwards to it
	// go to the guest's loopback like any other port's.
	NoInterpreter bool
	// E2BRunDir, when set, is envd's /run/e2b: the agent writes
	// .E2B_SANDBOX ("true") there at start and .E2B_SANDBOX_ID when it
	// learns its sandbox id (agentapi.SandboxIDHeader). sandbox-agent's default is
	// /run/e2b; empty writes nothing.
	E2BRunDir string
	// Hold holds every request but the node's (GET /health, the paths
	// under agentapi.InternalPathPrefix) until the node opens the agent
	// (POST agentapi.OpenPath), at most 30 s each, then 503 (hold.go).
	Hold bool
	// OpenedFile, when set, records the node's opening and the env /init
	// and the opening gave (JSON, 0600); an agent started again in the
	// same boot (qemu's stage 2 restarts it) reads it and starts open with
	// that env, rather than held until an opening that never comes.
	OpenedFile string
}

// agent is the handler's state: the /init env vars and the running processes.
type agent struct {
	o       Options
	mux     *http.ServeMux
	mu      sync.Mutex
	initEnv map[string]string
	// sandboxID is the last agentapi.SandboxIDHeader seen (guarded by mu).
	sandboxID string
	procs     map[int]*process
	closed    bool
	// watchers are the polled directory watchers (CreateWatcher).
	watchers watcherSet
	// interp serves the code interpreter (agentapi.InterpreterPort).
	interp *interpreter
	// log is the sandbox log (log.go).
	log *logRing
	// gate holds requests until the node opens the agent (hold.go).
	gate *gate
}

// NewHandler returns the agent's HTTP handler. Processes it starts live
// until they exit; Run kills the remaining ones when it returns.
func NewHandler(o Options) http.Handler { return newAgent(o) }

func newAgent(o Options) *agent {
	if o.Root == "" {
		o.Root, _ = os.Getwd()
	}
	o.Root, _ = filepath.Abs(o.Root)
	a := &agent{o: o, mux: http.NewServeMux(), initEnv: map[string]string{}, procs: map[int]*process{}, log: newLogRing(agentapi.MaxLogBytes), gate: newGate(o.Hold)}
	a.restoreOpened()
	a.interp = newInterpreter(a)
	a.writeRunFile(".E2B_SANDBOX", "true")
	m := a.mux
	m.HandleFunc("GET "+agentapi.HealthPath, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	m.HandleFunc("POST "+agentapi.InitPath, a.handleInit)
	m.HandleFunc("POST "+agentapi.OpenPath, a.handleOpen)
	m.HandleFunc("POST "+agentapi.IdentityPath, a.handleIdentity)
	m.HandleFunc("GET "+agentapi.LogsPath, a.handleLogs)
	m.HandleFunc("GET "+agentapi.OOMKillsPath, oomKillsHandler(vmstatPath)) // oom.go
	m.HandleFunc("GET /files", a.handleGetFile)
	m.HandleFunc("POST /files", a.handlePostFile)
	m.HandleFunc("POST /process.Process/Start", a.handleStart)
	m.HandleFunc("POST /process.Process/Connect", a.handleConnect)
	m.HandleFunc("POST /process.Process/List", a.handleList)
	m.HandleFunc("POST /process.Process/SendSignal", a.handleSendSignal)
	m.HandleFunc("POST /process.Process/SendInput", a.handleSendInput)
	m.HandleFunc("POST /process.Process/CloseStdin", a.handleCloseStdin)
	m.HandleFunc("POST /process.Process/Update", a.handleUpdate)
	m.HandleFunc("POST /filesystem.Filesystem/WatchDir", a.handleWatchDir)
	m.HandleFunc("POST /filesystem.Filesystem/CreateWatcher", a.handleCreateWatcher)
	m.HandleFunc("POST /filesystem.Filesystem/GetWatcherEvents", a.handleGetWatcherEvents)
	m.HandleFunc("POST /filesystem.Filesystem/RemoveWatcher", a.handleRemoveWatcher)
	m.HandleFunc("POST /filesystem.Filesystem/Stat", a.handleStat)
	m.HandleFunc("POST /filesystem.Filesystem/MakeDir", a.handleMakeDir)
	m.HandleFunc("POST /filesystem.Filesystem/ListDir", a.handleListDir)
	m.HandleFunc("POST /filesystem.Filesystem/Remove", a.handleRemove)
	m.HandleFunc("POST /filesystem.Filesystem/Move", a.handleMove)
	return a
}

// ServeHTTP checks X-Access-Token (all but the agent's own GET /health)
// and dispatches: a request carrying agentapi.ForwardPortHeader goes to that guest
// port, the rest to the agent's handlers.
func (a *agent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fport, fwd, ferr := forwardPort(r)
	// forwardOnly: admitted by the forward-only credential, not the token.
	forwardOnly := false
	if tok := a.token(); tok != "" && (fwd || !(r.Method == http.MethodGet && r.URL.Path == agentapi.HealthPath)) {
		got := r.Header.Get(agentapi.AccessTokenHeader)
		signed := !fwd && got == "" && agentapi.VerifyFileSignature(r, tok, time.Now()) == nil
		// The forward-only credential opens a forward to a valid port and
		// nothing else: never the agent's own routes.
		forwardOnly = fwd && ferr == nil && got == "" && subtle.ConstantTimeCompare([]byte(r.Header.Get(agentapi.ForwardTokenHeader)), []byte(agentapi.ForwardToken(tok))) == 1
		if !signed && !forwardOnly && subtle.ConstantTimeCompare([]byte(got), []byte(tok)) != 1 {
			if strings.HasPrefix(r.URL.Path, "/process.") || strings.HasPrefix(r.URL.Path, "/filesystem.") {
				writeUnaryError(w, errorf(codeUnauthenticated, "missing or invalid X-Access-Token"))
				return
			}
			writeRESTError(w, http.StatusUnauthorized, "missing or invalid X-Access-Token")
			return
		}
	}
	if id := r.Header.Get(agentapi.SandboxIDHeader); id != "" {
		a.noteSandboxID(id)
	}
	if fwd || isStream(r) {
		serve.Unbound(w) // authenticated: the stream lasts as long as it needs
	}
	if !a.gate.pass(w, r, fwd) {
		return // held until the node opened the agent, in vain (hold.go)
	}
	if fwd && ferr == nil && fport == agentapi.InterpreterPort && !a.o.NoInterpreter {
		// The interpreter runs code: the forward-only credential opens its
		// context calls only, never /execute.
		if forwardOnly && !interpreterContextCall(r) {
			writeRESTError(w, http.StatusUnauthorized, "the code interpreter runs code only for the sandbox token (X-Access-Token)")
			return
		}
		a.interp.ServeHTTP(w, r) // the code interpreter, in-process (interpreter.go)
		return
	}
	if fwd {
		a.forward(w, r)
		return
	}
	if strings.HasPrefix(r.URL.Path, agentapi.RuntimePrefix+"/") {
		a.serveRuntime(w, r) // agent-sandbox's runtime API (runtime.go)
		return
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
	srv := serve.NewServer(a, serveOptions)
	srv.RegisterOnShutdown(a.log.close) // followed logs end (logfollow.go)
	ln = serve.Listen(ln, serveOptions)
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

// serveOptions bound the agent's clients: every request gets
// serve.DefaultTimeouts' deadlines until it is authenticated; then process
// streams (Start, Connect), file transfers and port forwards lift them
// (ServeHTTP). The guest's descriptors are few, so the cap is the default
// one (the limit minus a reserve).
var serveOptions = serve.Options{Timeouts: serve.DefaultTimeouts}

// isStream reports the agent's long-lived routes.
func isStream(r *http.Request) bool {
	switch r.URL.Path {
	case "/process.Process/Start", "/process.Process/Connect", "/files":
		return true
	}
	return false
}

// noteSandboxID records the sandbox id an authenticated request was
// addressed to (agentapi.SandboxIDHeader): a short [a-z0-9] string, else ignored.
func (a *agent) noteSandboxID(id string) {
	if len(id) > 64 || strings.Trim(id, "abcdefghijklmnopqrstuvwxyz0123456789") != "" {
		return
	}
	a.mu.Lock()
	changed := a.sandboxID != id
	a.sandboxID = id
	a.mu.Unlock()
	if changed {
		a.writeRunFile(".E2B_SANDBOX_ID", id)
	}
}

// writeRunFile writes name in Options.E2BRunDir (best effort: a guest
// without a writable /run still serves).
func (a *agent) writeRunFile(name, value string) {
	if a.o.E2BRunDir == "" {
		return
	}
	if err := os.MkdirAll(a.o.E2BRunDir, 0o755); err == nil {
		_ = os.WriteFile(filepath.Join(a.o.E2BRunDir, name), []byte(value), 0o644)
	}
}

// Main is cmd/sandbox-agent: it parses args and runs until SIGTERM/SIGINT.
func Main(args []string) int {
	fs := flag.NewFlagSet("sandbox-agent", flag.ContinueOnError)
	var o Options
	var env string
	fs.StringVar(&o.Listen, "listen", "127.0.0.1:0", "address to serve on")
	fs.StringVar(&o.AddrFile, "addr-file", "", "file to write the bound address to")
	fs.StringVar(&o.Root, "root", "", "guest home directory (default: current directory)")
	fs.StringVar(&o.User, "user", "", "account processes run as by default (the agent must be root)")
	fs.StringVar(&env, "env", "", "comma-separated KEY=VALUE pairs added to every process (a value cannot hold a comma: use --env-file)")
	envFile := fs.String("env-file", "", "file holding a JSON object of environment variables added to every process (any value; with --env, the file wins)")
	fs.StringVar(&o.Python, "python", "python3", "interpreter of the code contexts served on port 49999")
	fs.BoolVar(&o.NoInterpreter, "no-interpreter", false, "do not serve the code interpreter: port 49999 is the guest's own")
	fs.BoolVar(&o.Hold, "hold", false, "hold every request but the node's (/health, /hearth/*) until the node opens the agent (POST /hearth/open)")
	fs.StringVar(&o.OpenedFile, "opened-file", "", "file recording the node's opening and /init's env, read again when the agent restarts in the same boot")
	fs.StringVar(&o.E2BRunDir, "e2b-run-dir", "/run/e2b", "envd's run directory (.E2B_SANDBOX, .E2B_SANDBOX_ID); empty: none")
	tokenFile := fs.String("token-file", "", "file holding the access token (default: $HEARTH_AGENT_TOKEN)")
	reserve := fs.Int("reserve-threads", 0, "OS threads to start before serving, for a guest whose processes share the agent's task budget (sim's pids.max): the Go runtime dies when it cannot start a thread, and a fork storm fills the budget")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *reserve > 0 {
		// It then needs a new thread only when more than about that many
		// of its goroutines are in a blocking system call at once (each
		// running process's wait is one).
		osthread.Reserve(min(*reserve, 1024))
	}
	o.Token = os.Getenv("HEARTH_AGENT_TOKEN")
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "sandbox-agent:", err)
			return 1
		}
		o.Token = strings.TrimSpace(string(b))
		o.TokenFile = *tokenFile
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
	if *envFile != "" {
		fromFile, err := readEnvFile(*envFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "sandbox-agent:", err)
			return 1
		}
		if o.Env == nil {
			o.Env = map[string]string{}
		}
		maps.Copy(o.Env, fromFile)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := Run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-agent:", err)
		return 1
	}
	return 0
}

// readEnvFile reads --env-file: a JSON object of names to values. A name
// that a process environment cannot hold (empty, or with '=' or NUL) or
// a value with NUL is an error.
func readEnvFile(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var env map[string]string
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, fmt.Errorf("%s: not a JSON object of strings: %w", path, err)
	}
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("%s: environment entry %q is not a NAME=value a process can hold", path, k)
		}
	}
	return env, nil
}
