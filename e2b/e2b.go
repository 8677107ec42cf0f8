// Package e2b is Hearth's e2b-compatible gateway (CONTRACT §7): e2b's REST
// control plane (create, list, get, kill, timeout, pause, connect, fork,
// snapshots, metrics, templates, health) over a claim.Fleet, and the data
// plane that reverse-proxies envd traffic — requests carrying
// E2b-Sandbox-Id / E2b-Sandbox-Port — to the sandbox's in-guest agent
// (package e2b/envd), so the unmodified e2b SDK works.
//
// An e2b create is the same node-local warm claim as a Kubernetes Create:
// the key comes from pool.KeyForE2B, the claim is recorded under
// "<namespace>/e2b-<random>" so it shows in `kubectl get sandboxes`, and no
// path cold-starts (no warm microVM → 503). Sandbox ids are rendered DNS
// label safe (RenderID); both spellings are accepted. Reads go through
// Fleet.ByID, never waiting for an inventory publish.
//
// Auth: X-API-KEY (constant-time) on every control-plane route but GET
// /health; with no keys configured New fails unless AllowAnonymous, which
// then disables the check. The data plane is authorized by the sandbox's
// own token (X-Access-Token), checked here and again by the agent. Every
// error body is JSON {"code":<status>,"message":"..."}.
//
// The package owns no state that outlives the process: the fleet (nodes)
// is the truth; the gateway only remembers recent creates (so a list right
// after a create shows them) and caches id → agent address for a second or
// two.
package e2b

import (
	"bufio"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/hearthvm/hearth/claim"
	"github.com/hearthvm/hearth/e2b/envd"
)

// Config configures the gateway.
type Config struct {
	Fleet claim.Fleet
	// Namespace receives every e2b claim (default "default"); sandboxes
	// recorded in other namespaces are invisible to the control plane.
	Namespace string
	// Domain is echoed as the sandbox domain (empty → null).
	Domain string
	// APIKeys are the accepted X-API-KEY values.
	APIKeys []string
	// AllowAnonymous serves without any key (only when APIKeys is empty).
	AllowAnonymous bool
	// EnvdVersion is advertised to the SDK (default envd.Version).
	EnvdVersion string
	// DefaultTimeoutSeconds is the lease of a create without timeout
	// (default 300, like e2b).
	DefaultTimeoutSeconds int64
	// Transport carries data-plane requests to agents (default: a tuned
	// http.Transport).
	Transport http.RoundTripper
}

// ErrNoKeys is returned by New when there are no API keys and anonymous
// access is not allowed.
var ErrNoKeys = errors.New("e2b gateway: no API keys configured (set --e2b-api-key-file, or --e2b-allow-anonymous to serve without authentication)")

// New returns the gateway handler.
func New(cfg Config) (http.Handler, error) {
	if cfg.Fleet == nil {
		return nil, errors.New("e2b gateway: no fleet")
	}
	keys := make([][]byte, 0, len(cfg.APIKeys))
	for _, k := range cfg.APIKeys {
		if k = strings.TrimSpace(k); k != "" {
			keys = append(keys, []byte(k))
		}
	}
	if len(keys) == 0 && !cfg.AllowAnonymous {
		return nil, ErrNoKeys
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "default"
	}
	if cfg.EnvdVersion == "" {
		cfg.EnvdVersion = envd.Version
	}
	if cfg.DefaultTimeoutSeconds <= 0 {
		cfg.DefaultTimeoutSeconds = 300
	}
	g := &gateway{
		cfg:    cfg,
		fleet:  cfg.Fleet,
		keys:   keys,
		recent: map[string]recentClaim{},
		routes: map[string]route{},
		now:    time.Now,
	}
	g.proxy = g.newProxy(cfg.Transport)
	g.mux = g.routesMux()
	return g, nil
}

// LoadKeys reads an API key file: one key a line, trimmed; blank lines and
// lines starting with '#' are ignored.
func LoadKeys(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var keys []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		keys = append(keys, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return keys, nil
}

// Options are the gateway's command-line flags, shared by sandbox-e2b,
// sandbox-apiserver --enable-e2b-api and sandbox-dev.
type Options struct {
	BindAddress    string
	Namespace      string
	APIKeyFile     string
	Domain         string
	AllowAnonymous bool
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{BindAddress: "127.0.0.1:3000", Namespace: "default"}
}

// AddFlags registers --e2b-bind-address, --e2b-namespace,
// --e2b-api-key-file, --e2b-domain and --e2b-allow-anonymous.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.BindAddress, "e2b-bind-address", o.BindAddress, "address the e2b API (and envd data plane) listens on")
	fs.StringVar(&o.Namespace, "e2b-namespace", o.Namespace, "namespace that receives e2b sandboxes")
	fs.StringVar(&o.APIKeyFile, "e2b-api-key-file", o.APIKeyFile, "file of accepted e2b API keys, one a line, '#' comments")
	fs.StringVar(&o.Domain, "e2b-domain", o.Domain, "domain echoed to e2b clients as the sandbox domain")
	fs.BoolVar(&o.AllowAnonymous, "e2b-allow-anonymous", o.AllowAnonymous, "serve the e2b API without API keys")
}

// Config loads the key file and returns the gateway configuration for fleet;
// it fails like New when there would be no keys.
func (o *Options) Config(fleet claim.Fleet) (Config, error) {
	cfg := Config{Fleet: fleet, Namespace: o.Namespace, Domain: o.Domain, AllowAnonymous: o.AllowAnonymous}
	if o.APIKeyFile != "" {
		keys, err := LoadKeys(o.APIKeyFile)
		if err != nil {
			return cfg, fmt.Errorf("--e2b-api-key-file: %w", err)
		}
		cfg.APIKeys = keys
	}
	if len(cfg.APIKeys) == 0 && !cfg.AllowAnonymous {
		return cfg, ErrNoKeys
	}
	return cfg, nil
}

// gateway is the handler.
type gateway struct {
	cfg   Config
	fleet claim.Fleet
	keys  [][]byte
	mux   *http.ServeMux
	proxy http.Handler
	now   func() time.Time

	mu     sync.Mutex
	recent map[string]recentClaim // rendered id → a claim made here
	routes map[string]route       // client id → cached agent route
}

// ServeHTTP routes envd traffic (E2b-Sandbox-Id) to the data plane and the
// rest to the authenticated control plane.
func (g *gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("E2b-Sandbox-Id") != "" {
		g.serveData(w, r)
		return
	}
	if !(r.Method == http.MethodGet && r.URL.Path == "/health") && !g.authorized(r) {
		writeError(w, http.StatusUnauthorized, "invalid API key")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
	g.mux.ServeHTTP(w, r)
}

// authorized checks X-API-KEY against every key in constant time.
func (g *gateway) authorized(r *http.Request) bool {
	if len(g.keys) == 0 {
		return g.cfg.AllowAnonymous
	}
	got := []byte(r.Header.Get("X-API-KEY"))
	ok := 0
	for _, k := range g.keys {
		ok |= subtle.ConstantTimeCompare(got, k)
	}
	return ok == 1
}

// apiError is every error body.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, status int, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(apiError{Code: status, Message: fmt.Sprintf(format, args...)})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
