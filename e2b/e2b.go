// Package e2b is Hearth's e2b-compatible gateway (docs/API.md#e2b-api): e2b's REST
// control plane (create, list, get, kill, timeout, pause, connect, fork,
// snapshots, metrics, logs, templates, health) over a Fleet, and the data
// plane that reverse-proxies envd traffic — requests carrying
// E2b-Sandbox-Id / E2b-Sandbox-Port — to the sandbox's in-guest agent
// (package agent), so the unmodified e2b SDK works.
//
// An e2b create is the same node-local warm claim as a Kubernetes Create,
// the same request (nodeapi.ClaimRequest, built by handleCreate):
// the key comes from pool.KeyForE2B, the claim is recorded under
// "<namespace>/e2b-<random>" so it shows in `kubectl get sandboxes`, and no
// path cold-starts (no warm microVM → 503). The claim is checked against
// the claim rules (nodeapi.ClaimRequest.Validate, docs/API.md#claim-rules:
// envVars, metadata) before any node is asked, a breach being a 400.
// Creates and forks claim
// through fleet.Detached, as the Kubernetes surface does: the claim runs
// to its answer if the client goes away, and what it delivered is then
// released.
//
// Each API key acts in one namespace (APIKey, LoadKeys: "<key>
// [namespace]" a line): its creates land there, labelled sandbox.LabelE2B,
// and the control plane shows it only that namespace's e2b sandboxes
// (visible: nodeapi.Lifecycle.E2B, which the node fixes at claim — an
// e2b create, its fork children and snapshot clones, a Kubernetes Create
// whose object carried the label; a later label change does not count)
// and that namespace's snapshots of e2b sandboxes (nodeapi.Snapshot.E2B).
// Only an e2b create's ports are public by default (nodeapi.Lifecycle.PublicTraffic);
// every other sandbox's need its token or traffic token. Sandbox ids are rendered DNS
// label safe (RenderID); both spellings are accepted. Reads go through
// Fleet.LiveByID, never waiting for an inventory publish; errors map
// through fleet.HTTPStatus, like the Kubernetes surface's.
//
// Auth comes before any fleet lookup, so an unauthenticated request costs
// no node call: X-API-KEY (constant-time) on every control-plane route but
// GET /health (with no keys configured New fails unless AllowAnonymous,
// which then disables the check); on the data plane a well-formed
// X-Access-Token (or traffic access token, or API key) first, then —
// always — the sandbox's own token, which the agent checks again; for a
// port other than envd's, the sandbox's traffic access token (TrafficToken,
// returned as trafficAccessToken) stands in for it. The data plane finds
// sandboxes only through Fleet.KnownByID (the one node the fleet's index
// or view names; none for an id neither names), never a fan-out, whatever
// credential a request carries; the router authorizes a Kubernetes bearer
// before any lookup and checks a sandbox token against that one node too.
// Not-found lookups are cached for missTTL. Every error body is JSON {"code":<status>,"message":"..."},
// unknown routes and unclean paths included.
//
// Logs (logs.go) are the sandbox log its agent keeps (package agent:
// processes started through the API, their output lines, the agent's
// errors; never an environment), read through its node, in e2b's shape.
//
// The data plane reaches any port of a sandbox, addressed by the headers
// or by e2b's host "<port>-<sandboxId>.<Domain>" (HostRoute): port 49983
// (or none) is the agent itself; any other port goes through the agent's
// authenticated forward (agentapi.ForwardPortHeader) to that port of the
// guest — 49999 to the agent's own code interpreter — with the
// forward-only credential (agentapi.ForwardToken), never the sandbox token.
// Identity and routing are set on the outbound request alone, in the
// proxy's Rewrite (upstream), after every client-sent internal header is
// dropped; the agent's node-only paths (agentapi.InternalPathPrefix) are 404.
// A create for
// BaseTemplate or CodeInterpreterTemplate claims from the default pool
// (TemplateAliases).
// A driver that can dial guest ports directly would plug in at the
// proxy's transport, keyed by the route. The transport's connections to
// agents draw from the process's connection budget (Config.Budget,
// serve.Budget.Dial): at most half of it, a quarter of that to one
// sandbox; past either a request is a 503 with Retry-After.
//
// Lifecycle: a create's autoPause / autoPauseMemory / autoResume become
// the claim's nodeapi.Lifecycle, which the node records and acts on (it
// pauses at the timeout instead of destroying); the gateway only reports
// it and, for autoResume, resumes a paused sandbox on a data-plane
// request. A pause with {"memory": false} is the node's pause without
// memory (the VM stops, its disk is kept).
//
// Egress (docs/API.md#egress-policy): a create's allow_internet_access and
// network.allowOut / denyOut become the claim's egress policy
// (egress.FromE2B, in egressOf) and pick its lane — any list is the egress
// lane filtered by the policy; without lists allow_internet_access true is
// the egress lane unfiltered, false or absent the none lane (no network).
// A bad list is a 400 naming network.allowOut[i] / denyOut[i] before any
// node is asked; a list on a create from a snapshot is a 400 (the clone
// keeps the snapshot's policy). The node enforces and records the policy;
// GET renders it back (networkOf) and PUT /sandboxes/{id}/network, the
// SDK's updateNetwork, is a 409: the policy is fixed at claim time.
//
// Snapshots are the namespace's (nodeapi.Snapshot.Namespace) and e2b's
// (nodeapi.Snapshot.E2B): listing, deleting and creating from one (a
// templateID "sn_…" or a snapshot's name) see no other namespace's, and no
// snapshot of a sandbox the key does not see. A create from a snapshot is
// Fleet.ClaimSnapshot on the node holding it, which records the create's
// metadata like any claim's (a fork child inherits its parent's), so
// ?metadata= finds it on every replica and after any restart.
//
// The package owns no state that outlives the process and no sandbox
// state at all: the fleet (its claim-time index, the view, the nodes) is
// the truth, so a list right after a create shows it; the gateway only
// caches id → agent address for a second or two. It must not import the
// node daemon: it speaks nodeapi types through the fleet.
package e2b

import (
	"bufio"
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"

	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/internal/serve"
)

// Config configures the gateway.
type Config struct {
	Fleet Fleet
	// Namespace is the namespace of a key that names none (APIKeys, a
	// key alone on its line) and of anonymous access (default "default").
	Namespace string
	// Domain is echoed as the sandbox domain (empty → null).
	Domain string
	// APIKeys are accepted X-API-KEY values, each acting in Namespace.
	APIKeys []string
	// Keys are accepted X-API-KEY values with the namespace each acts in
	// (LoadKeys reads them from --e2b-api-key-file).
	Keys []APIKey
	// AllowAnonymous serves without any key (only when APIKeys is empty).
	AllowAnonymous bool
	// EnvdVersion is advertised to the SDK (default agentapi.Version).
	EnvdVersion string
	// DefaultTimeoutSeconds is the lease of a create or fork without
	// timeout. 0: the nodes' default lease (nodeapi.Info, the smallest any
	// node reports), else 300, like e2b.
	DefaultTimeoutSeconds int64
	// MaxTimeoutSeconds bounds every asked timeout (create, connect,
	// setTimeout, fork); above it is a 400, like e2b's "Timeout cannot be
	// greater than 24 hours". 0: the nodes' longest lease (nodeapi.Info,
	// the smallest any node reports; re-read every minute), else 86400.
	MaxTimeoutSeconds int64
	// Transport carries data-plane requests to agents (default: a tuned
	// http.Transport whose connections draw from Budget).
	Transport http.RoundTripper
	// Budget is the connection budget the default Transport's connections
	// to agents draw from (serve.Budget.Dial: at most half of it, a
	// quarter of that to one sandbox; 503 with Retry-After past either);
	// nil is the process's (serve.Shared), which the gateway's and the
	// other servers' accepted connections draw from too.
	Budget *serve.Budget
	// Authorizer admits Kubernetes bearer tokens on the router protocol
	// (router.go); nil admits only each sandbox's own token.
	Authorizer SandboxAuthorizer
	// Refs finds sandboxes by name for the router protocol (default: the
	// Fleet, when it can).
	Refs RefLookup
	// TemplateAliases maps a create's templateID to the template it claims
	// when no node serves a pool of that name (default: DefaultAliases).
	// A nil map is the default; an empty one has no aliases.
	TemplateAliases map[string]string
	// TLS, when set, serves the gateway over TLS (Listen): a wildcard
	// certificate for *.Domain and Domain serves the control plane and
	// every host-routed sandbox port. Nil serves plain HTTP.
	TLS *tls.Config
}

// CodeInterpreterTemplate is the template @e2b/code-interpreter's
// Sandbox.create() asks for when given none.
const CodeInterpreterTemplate = "code-interpreter-v1"

// BaseTemplate is the template the e2b SDK's Sandbox.create() asks for
// when given none (e2b's own base image).
const BaseTemplate = "base"

// DefaultTemplate is the image of sandbox-dev's default pool "rt" (the
// built-in Debian image; image.DefaultRef, which a test keeps equal).
const DefaultTemplate = "ghcr.io/cocoonstack/sandbox/rt:24.04"

// DefaultAliases sends the SDKs' default templates — the e2b SDK's "base"
// and @e2b/code-interpreter's "code-interpreter-v1" — to the default pool,
// whose image is a base image like e2b's and whose agent serves the code
// interpreter (agent InterpreterPort).
func DefaultAliases() map[string]string {
	return map[string]string{BaseTemplate: DefaultTemplate, CodeInterpreterTemplate: DefaultTemplate}
}

// ErrNoKeys is returned by New when there are no API keys and anonymous
// access is not allowed.
var ErrNoKeys = errors.New("e2b gateway: no API keys configured (set --e2b-api-key-file, or --e2b-allow-anonymous to serve without authentication)")

// New returns the gateway handler.
func New(cfg Config) (http.Handler, error) {
	if cfg.Fleet == nil {
		return nil, errors.New("e2b gateway: no fleet")
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "default"
	}
	all := append([]APIKey(nil), cfg.Keys...)
	for _, k := range cfg.APIKeys {
		all = append(all, APIKey{Key: k})
	}
	keys := make([]configuredKey, 0, len(all))
	namespaces := map[string]bool{cfg.Namespace: true}
	seen := map[string]string{}
	for _, k := range all {
		key, ns := strings.TrimSpace(k.Key), k.Namespace
		if key == "" {
			continue
		}
		if ns == "" {
			ns = cfg.Namespace
		}
		if errs := apivalidation.ValidateNamespaceName(ns, false); len(errs) > 0 {
			return nil, fmt.Errorf("e2b gateway: API key namespace %q: %s", ns, strings.Join(errs, "; "))
		}
		if prev, ok := seen[key]; ok && prev != ns {
			return nil, fmt.Errorf("e2b gateway: one API key is given for namespaces %q and %q", prev, ns)
		}
		seen[key] = ns
		keys = append(keys, configuredKey{key: []byte(key), namespace: ns})
		namespaces[ns] = true
	}
	if len(keys) == 0 && !cfg.AllowAnonymous {
		return nil, ErrNoKeys
	}
	if cfg.EnvdVersion == "" {
		cfg.EnvdVersion = agentapi.Version
	}
	g := &gateway{
		cfg:        cfg,
		fleet:      cfg.Fleet,
		keys:       keys,
		namespaces: namespaces,
		routes:     newRouteCache(cacheSize),
		misses:     newMissCache(cacheSize, missTTL),
		now:        time.Now,
	}
	if g.aliases = cfg.TemplateAliases; g.aliases == nil {
		g.aliases = DefaultAliases()
	}
	if g.refs = cfg.Refs; g.refs == nil {
		g.refs, _ = cfg.Fleet.(RefLookup)
	}
	g.proxy = g.newProxy(cfg.Transport)
	g.mux = g.routesMux()
	return g, nil
}

// An APIKey is an accepted X-API-KEY value and the namespace it acts in:
// its creates land there, and it sees (lists, gets, kills, pauses,
// connects, forks, snapshots) only that namespace's e2b sandboxes
// (nodeapi.Lifecycle.E2B) and their snapshots.
type APIKey struct {
	Key string
	// Namespace is the key's namespace; empty is Config.Namespace.
	Namespace string
}

// configuredKey is an accepted key and its namespace.
type configuredKey struct {
	key       []byte
	namespace string
}

// LoadKeys reads an API key file: one key a line, optionally followed by
// the namespace it acts in ("e2b_… team-a"; a key alone acts in
// --e2b-namespace), fields separated by blanks; blank lines and lines
// starting with '#' are ignored. A bad namespace or a third field is an
// error naming the line (never the key).
func LoadKeys(path string) ([]APIKey, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var keys []APIKey
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		k := APIKey{Key: fields[0]}
		switch len(fields) {
		case 1:
		case 2:
			k.Namespace = fields[1]
			if errs := apivalidation.ValidateNamespaceName(k.Namespace, false); len(errs) > 0 {
				return nil, fmt.Errorf("%s line %d: namespace %.64q: %s", path, n, k.Namespace, strings.Join(errs, "; "))
			}
		default:
			return nil, fmt.Errorf("%s line %d: want \"<key> [namespace]\", got %d fields", path, n, len(fields))
		}
		keys = append(keys, k)
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
	// TLSCertFile and TLSKeyFile are a PEM certificate (a wildcard for
	// *.Domain, with Domain itself) and its key; both or neither.
	TLSCertFile, TLSKeyFile string
	// TemplateAliases is Config.TemplateAliases.
	TemplateAliases map[string]string
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{BindAddress: "127.0.0.1:3000", Namespace: "default", TemplateAliases: DefaultAliases()}
}

// AddFlags registers --e2b-bind-address, --e2b-namespace,
// --e2b-api-key-file, --e2b-domain, --e2b-allow-anonymous and
// --e2b-template-alias.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.BindAddress, "e2b-bind-address", o.BindAddress, "address the e2b API (and envd data plane) listens on")
	fs.StringVar(&o.Namespace, "e2b-namespace", o.Namespace, "namespace of the e2b API keys that name none (their sandboxes are created and seen there)")
	fs.StringVar(&o.APIKeyFile, "e2b-api-key-file", o.APIKeyFile, "file of accepted e2b API keys, one a line, each optionally followed by the namespace it acts in (\"<key> [namespace]\"; a key alone acts in --e2b-namespace), '#' comments")
	fs.StringVar(&o.Domain, "e2b-domain", o.Domain, "domain echoed to e2b clients as the sandbox domain")
	fs.BoolVar(&o.AllowAnonymous, "e2b-allow-anonymous", o.AllowAnonymous, "serve the e2b API without API keys")
	fs.StringVar(&o.TLSCertFile, "e2b-tls-cert-file", o.TLSCertFile, "PEM certificate the gateway serves TLS with (a wildcard for *.<e2b-domain> and <e2b-domain>); without it the gateway serves plain HTTP, meant for loopback or behind a TLS-terminating proxy")
	fs.StringVar(&o.TLSKeyFile, "e2b-tls-key-file", o.TLSKeyFile, "PEM private key of --e2b-tls-cert-file")
	fs.StringToStringVar(&o.TemplateAliases, "e2b-template-alias", o.TemplateAliases, "templateID=template pairs: a create for templateID claims template unless a pool of templateID exists")
}

// Config loads the key file and returns the gateway configuration for fleet;
// it fails like New when there would be no keys.
func (o *Options) Config(fleet Fleet) (Config, error) {
	cfg := Config{Fleet: fleet, Namespace: o.Namespace, Domain: o.Domain, AllowAnonymous: o.AllowAnonymous, TemplateAliases: o.TemplateAliases}
	if o.TLSCertFile != "" {
		pair, err := tls.LoadX509KeyPair(o.TLSCertFile, o.TLSKeyFile)
		if err != nil {
			return cfg, fmt.Errorf("--e2b-tls-cert-file/--e2b-tls-key-file: %w", err)
		}
		cfg.TLS = ServerTLS(pair)
	}
	if o.APIKeyFile != "" {
		keys, err := LoadKeys(o.APIKeyFile)
		if err != nil {
			return cfg, fmt.Errorf("--e2b-api-key-file: %w", err)
		}
		cfg.Keys = keys
	}
	if len(cfg.Keys) == 0 && !cfg.AllowAnonymous {
		return cfg, ErrNoKeys
	}
	return cfg, nil
}

// gateway is the handler.
type gateway struct {
	cfg   Config
	fleet Fleet
	// The nodes' lease bounds (nodeLeaseBounds) and when they were read.
	leaseMu            sync.Mutex
	leaseDef, leaseMax int64
	leaseAt            time.Time
	keys               []configuredKey
	// namespaces are the keys' namespaces (and Config.Namespace): the
	// data plane reaches sandboxes there.
	namespaces map[string]bool
	mux        *http.ServeMux
	proxy      http.Handler
	refs       RefLookup
	aliases    map[string]string
	now        func() time.Time

	routes *routeCache // client id → cached agent route
	misses *missCache  // client id → its cached not-found
}

// maxBodyBytes bounds every control-plane request body (413 above it).
const maxBodyBytes = 1 << 20

// ServeHTTP routes envd traffic (E2b-Sandbox-Id) to the data plane and the
// rest to the authenticated control plane. Both authenticate before
// anything reaches the fleet: the control plane by API key, the data plane
// by a well-formed access token (or an API key); either failing is a 401
// that costs no node call.
func (g *gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id, port := r.Header.Get("E2b-Sandbox-Id"), r.Header.Get("E2b-Sandbox-Port")
	hid, hport, hostRouted := HostRoute(r.Host, g.cfg.Domain)
	if hostRouted {
		id, port = hid, hport
	}
	if r.Header.Get(HeaderSandboxID) != "" {
		g.serveRouter(w, r)
		return
	}
	if id != "" {
		if !wellFormedToken(r.Header.Get("X-Access-Token")) && !wellFormedToken(r.Header.Get(TrafficTokenHeader)) &&
			!g.keyed(r) && !agentapi.HasFileSignature(r) && !publicPortValue(port) {
			writeError(w, http.StatusUnauthorized, "missing or invalid X-Access-Token")
			return
		}
		serve.Unbound(w) // a data-plane stream lasts as long as it needs
		g.serveData(w, r, id, port)
		return
	}
	ns, ok := g.authorized(r)
	if !(r.Method == http.MethodGet && r.URL.Path == "/health") && !ok {
		writeError(w, http.StatusUnauthorized, "invalid API key")
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), namespaceKey{}, ns))
	if p := r.URL.Path; p == "" || p[0] != '/' || path.Clean(p) != p {
		// ServeMux would redirect an unclean path (".." segments, "//",
		// a trailing slash); e2b answers a JSON 404.
		writeError(w, http.StatusNotFound, "no route for %s %q", r.Method, p)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	g.serveMux(w, r)
}

// authorized checks X-API-KEY against every key in constant time and
// returns the namespace of the one it is; with no keys it is
// AllowAnonymous, in Config.Namespace.
func (g *gateway) authorized(r *http.Request) (namespace string, ok bool) {
	if len(g.keys) == 0 {
		return g.cfg.Namespace, g.cfg.AllowAnonymous
	}
	return g.keyNamespace(r)
}

// keyed reports whether the request carries one of the configured API keys.
func (g *gateway) keyed(r *http.Request) bool {
	_, ok := g.keyNamespace(r)
	return ok
}

// keyNamespace compares X-API-KEY with every key (each in constant time,
// all of them always) and returns the namespace of the matching one.
func (g *gateway) keyNamespace(r *http.Request) (string, bool) {
	got := []byte(r.Header.Get("X-API-KEY"))
	if len(got) == 0 {
		return "", false
	}
	ns, ok := "", false
	for _, k := range g.keys {
		if subtle.ConstantTimeCompare(got, k.key) == 1 {
			ns, ok = k.namespace, true
		}
	}
	return ns, ok
}

// namespaceKey carries, in a control-plane request's context, the
// namespace its API key acts in.
type namespaceKey struct{}

// namespaceOf is the namespace of the API key of the request whose
// context ctx is.
func (g *gateway) namespaceOf(ctx context.Context) string {
	if ns, _ := ctx.Value(namespaceKey{}).(string); ns != "" {
		return ns
	}
	return g.cfg.Namespace
}

// wellFormedToken reports whether t could be a sandbox access token: 16 to
// 256 bytes of URL- and header-safe characters (the node issues 48 hex
// digits). It is the data plane's check before any lookup; the token's
// value is checked against the sandbox's after it.
func wellFormedToken(t string) bool {
	if len(t) < 16 || len(t) > 256 {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~+/=", c) >= 0) {
			return false
		}
	}
	return true
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
