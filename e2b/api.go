package e2b

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
	"github.com/hearthvm/hearth/sandbox"
)

// Fleet is what the gateway needs from the nodes; *fleet.NodeFleet
// satisfies it. Lookups are live (LiveByID: the sandbox's token comes with
// them) and List includes the fleet's unpublished claims, so a sandbox is
// visible here as soon as its claim returns.
type Fleet interface {
	Claim(ctx context.Context, req fleet.Request) (nodeapi.Sandbox, error)
	LiveByID(ctx context.Context, id string) (nodeapi.Sandbox, error)
	// KnownByID finds id through the fleet's index or view and asks only
	// the node they name (never a fan-out); ErrNotFound otherwise.
	KnownByID(ctx context.Context, id string) (nodeapi.Sandbox, error)
	List(ctx context.Context) ([]nodeapi.Sandbox, error)
	Pools(ctx context.Context) ([]nodeapi.PoolInfo, error)
	Release(ctx context.Context, s nodeapi.Sandbox) error
	Pause(ctx context.Context, s nodeapi.Sandbox) error
	// PauseWithoutMemory pauses s keeping only its file system (its VM
	// stops; a resume restarts it from its disk).
	PauseWithoutMemory(ctx context.Context, s nodeapi.Sandbox) error
	Resume(ctx context.Context, s nodeapi.Sandbox) error
	Fork(ctx context.Context, s nodeapi.Sandbox, count int, ttlSeconds int64) ([]nodeapi.Sandbox, error)
	Snapshot(ctx context.Context, s nodeapi.Sandbox, name string) (nodeapi.Snapshot, error)
	Snapshots(ctx context.Context) ([]nodeapi.Snapshot, error)
	DeleteSnapshot(ctx context.Context, id string) error
	Renew(ctx context.Context, s nodeapi.Sandbox, ttlSeconds int64) (time.Time, error)
	Stats(ctx context.Context, s nodeapi.Sandbox) (nodeapi.Stats, error)
	// ClaimSnapshot claims a new sandbox cloned from snap on the node
	// holding it, recorded under req.Ref (req.Key and req.Object are ignored).
	ClaimSnapshot(ctx context.Context, snap nodeapi.Snapshot, req fleet.Request) (nodeapi.Sandbox, error)
	// SetLabels replaces s's recorded labels and annotations.
	SetLabels(ctx context.Context, s nodeapi.Sandbox, req nodeapi.LabelsRequest) (nodeapi.Sandbox, error)
	// LeaseBounds are the nodes' lease bounds, the strictest of them (0:
	// none reported).
	LeaseBounds(ctx context.Context) (defaultSeconds, maxSeconds int64, err error)
}

var _ Fleet = (*fleet.NodeFleet)(nil)

func (g *gateway) routesMux() *http.ServeMux {
	m := http.NewServeMux()
	m.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	m.HandleFunc("POST /v2/sandboxes", g.handleCreate)
	m.HandleFunc("POST /sandboxes", g.handleCreate)
	m.HandleFunc("GET /v2/sandboxes", g.handleList)
	m.HandleFunc("GET /sandboxes", g.handleListV1)
	m.HandleFunc("GET /sandboxes/{id}", g.handleGet)
	m.HandleFunc("DELETE /sandboxes/{id}", g.handleKill)
	m.HandleFunc("POST /sandboxes/{id}/timeout", g.handleTimeout)
	m.HandleFunc("POST /sandboxes/{id}/refreshes", g.handleRefresh)
	m.HandleFunc("POST /sandboxes/{id}/pause", g.handlePause)
	m.HandleFunc("POST /v2/sandboxes/{id}/connect", g.handleConnect)
	m.HandleFunc("POST /sandboxes/{id}/connect", g.handleConnect)
	m.HandleFunc("POST /sandboxes/{id}/resume", g.handleConnect)
	m.HandleFunc("POST /sandboxes/{id}/fork", g.handleFork)
	m.HandleFunc("POST /sandboxes/{id}/snapshots", g.handleSnapshot)
	m.HandleFunc("GET /snapshots", g.handleListSnapshots)
	m.HandleFunc("DELETE /templates/{id}", g.handleDeleteSnapshot)
	m.HandleFunc("GET /sandboxes/{id}/metrics", g.handleMetrics)
	m.HandleFunc("GET /templates", g.handleTemplates)
	m.HandleFunc("GET /v2/templates", g.handleTemplates)
	return m
}

// serveMux serves r through the routes, answering an unknown path 404 and
// a known path with another method 405 with Allow (ServeMux's own
// decision, which method patterns make), both with e2b's JSON error body.
func (g *gateway) serveMux(w http.ResponseWriter, r *http.Request) {
	if _, pattern := g.mux.Handler(r); pattern != "" {
		g.mux.ServeHTTP(w, r)
		return
	}
	var probe statusProbe
	g.mux.ServeHTTP(&probe, r)
	if probe.status == http.StatusMethodNotAllowed {
		allow := probe.header.Get("Allow")
		w.Header().Set("Allow", allow)
		writeError(w, http.StatusMethodNotAllowed, "method %s is not allowed on %q (allowed: %s)", r.Method, r.URL.Path, allow)
		return
	}
	writeError(w, http.StatusNotFound, "no route for %s %q", r.Method, r.URL.Path)
}

// statusProbe records the status and headers ServeMux answers a request
// no route matches with, and drops its plain-text body.
type statusProbe struct {
	header http.Header
	status int
}

func (p *statusProbe) Header() http.Header {
	if p.header == nil {
		p.header = http.Header{}
	}
	return p.header
}

func (p *statusProbe) WriteHeader(status int) {
	if p.status == 0 {
		p.status = status
	}
}

func (p *statusProbe) Write(b []byte) (int, error) {
	p.WriteHeader(http.StatusOK)
	return len(b), nil
}

// fail writes err (about what) as an e2b error answer, with the status
// fleet.HTTPStatus maps it to, as on the Kubernetes surface: a node's
// quota refusal (fork depth or tree size, non-pool VMs, snapshot bytes)
// is a 429, a limit the caller reached; no warm microVM is a 503.
func fail(w http.ResponseWriter, err error, what string) {
	if status := fleet.HTTPStatus(err); status == http.StatusNotFound {
		writeError(w, status, "%s not found", what)
	} else {
		writeError(w, status, "%s: %v", what, err)
	}
}

// decodeBody decodes an optional JSON body; empty is fine.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, "request body exceeds %d bytes", tooBig.Limit)
		} else {
			writeError(w, http.StatusBadRequest, "reading the body: %v", err)
		}
		return false
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return true
	}
	if err := json.Unmarshal(b, v); err != nil {
		writeError(w, http.StatusBadRequest, "malformed JSON body: %v", err)
		return false
	}
	return true
}

// namespaceOfRef is the namespace part of a claim ref ("" without one).
func namespaceOfRef(ref string) string {
	ns, _, ok := strings.Cut(ref, "/")
	if !ok {
		return ""
	}
	return ns
}

// visible reports whether an API key of namespace ns sees s: s is in ns
// and e2b's (nodeapi.Lifecycle.E2B: every e2b create, its fork children
// and snapshot clones, and a Kubernetes-created sandbox whose object
// carried sandbox.LabelE2B "true" when it was created). Its labels do
// not count: `patch sandboxes` would otherwise hand anyone's sandbox, and
// its token, to a namespace's e2b key.
func visible(ns string, s nodeapi.Sandbox) bool {
	return namespaceOfRef(s.ClaimRef) == ns && s.E2B
}

// errNotVisible is a lookup's not-found for a sandbox that exists but is
// not the caller's to see: never cached as a miss (another key may see it).
var errNotVisible = fmt.Errorf("%w (not visible to this API key)", fleet.ErrNotFound)

// lookup resolves a client-supplied sandbox id (raw or rendered) through
// the fleet, live, for the control plane: only the sandboxes the request's
// API key sees (visible) are found.
//
// A not-found is remembered for missTTL, so a burst of requests for an
// unknown id costs one fleet lookup, not one each.
func (g *gateway) lookup(ctx context.Context, given string) (nodeapi.Sandbox, error) {
	ns := g.namespaceOf(ctx)
	return g.lookupBy(ctx, given, g.fleet.LiveByID, true, func(s nodeapi.Sandbox) bool { return visible(ns, s) })
}

// lookupKnown is lookup for the data plane, where no credential can be
// checked before the sandbox's record is found: each spelling of given is
// asked of the node the fleet's index or view names, never of every node
// (Fleet.KnownByID), and the fleet's list is not scanned for other
// spellings.
// A sandbox token opens its sandbox whatever its labels, in any of the
// keys' namespaces.
func (g *gateway) lookupKnown(ctx context.Context, given string) (nodeapi.Sandbox, error) {
	return g.lookupBy(ctx, given, g.fleet.KnownByID, false, func(s nodeapi.Sandbox) bool { return g.namespaces[namespaceOfRef(s.ClaimRef)] })
}

// lookupBy is lookup with find asking for one claim id and sees telling
// which records the caller may see; scan also tries the ids of the
// fleet's list that given may spell.
func (g *gateway) lookupBy(ctx context.Context, given string, find func(context.Context, string) (nodeapi.Sandbox, error), scan bool, sees func(nodeapi.Sandbox) bool) (nodeapi.Sandbox, error) {
	given = strings.TrimSpace(given)
	if given == "" || len(given) > maxIDLen {
		return nodeapi.Sandbox{}, fleet.ErrNotFound
	}
	if g.missed(given) {
		return nodeapi.Sandbox{}, fleet.ErrNotFound
	}
	s, err := g.lookupFleet(ctx, given, find, scan, sees)
	if errors.Is(err, fleet.ErrNotFound) && !errors.Is(err, fleet.ErrIncomplete) && !errors.Is(err, errNotVisible) {
		g.miss(given)
	}
	return s, err
}

// maxIDLen bounds a client-supplied sandbox id (the node's are ~20 bytes).
const maxIDLen = 128

// missTTL is how long a not-found is served from memory.
const missTTL = 2 * time.Second

func (g *gateway) missed(given string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	exp, ok := g.misses[given]
	if ok && g.now().Before(exp) {
		return true
	}
	if ok {
		delete(g.misses, given)
	}
	return false
}

func (g *gateway) miss(given string) {
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.misses) >= 100000 { // bound the cache
		for k, exp := range g.misses {
			if !now.Before(exp) {
				delete(g.misses, k)
			}
		}
		if len(g.misses) >= 100000 {
			clear(g.misses)
		}
	}
	g.misses[given] = now.Add(missTTL)
}

// unmiss forgets cached not-founds for a sandbox that now exists.
func (g *gateway) unmiss(s nodeapi.Sandbox) {
	g.mu.Lock()
	delete(g.misses, s.ID)
	delete(g.misses, RenderID(s.ID))
	g.mu.Unlock()
}

func (g *gateway) lookupFleet(ctx context.Context, given string, find func(context.Context, string) (nodeapi.Sandbox, error), scan bool, sees func(nodeapi.Sandbox) bool) (nodeapi.Sandbox, error) {
	tried := map[string]bool{}
	hidden := false
	try := func(id string) (nodeapi.Sandbox, bool, error) {
		tried[id] = true
		s, err := find(ctx, id)
		switch {
		case err == nil:
			if !MatchID(s.ID, given) {
				return s, false, nil
			}
			if !sees(s) {
				hidden = true
				return s, false, nil
			}
			return s, true, nil
		case errors.Is(err, fleet.ErrNotFound):
			return s, false, nil
		}
		return s, false, err
	}
	for _, c := range idCandidates(given) {
		if s, ok, err := try(c); ok || err != nil {
			return s, err
		}
	}
	notFound := func() error {
		if hidden {
			return errNotVisible
		}
		return fleet.ErrNotFound
	}
	if !scan {
		return nodeapi.Sandbox{}, notFound()
	}
	// An id in a spelling we cannot invert: scan the fleet's list.
	all, err := g.fleet.List(ctx)
	if err != nil {
		return nodeapi.Sandbox{}, err
	}
	for _, l := range all {
		if !tried[l.ID] && MatchID(l.ID, given) {
			if s, ok, err := try(l.ID); ok || err != nil {
				return s, err
			}
		}
	}
	return nodeapi.Sandbox{}, notFound()
}

func (g *gateway) forget(s nodeapi.Sandbox) { g.dropRoute(s.ID) }

// sandboxJSON is e2b's Sandbox (create, connect, fork).
type sandboxJSON struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	ClientID           string  `json:"clientID"`
	Alias              string  `json:"alias"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    *string `json:"envdAccessToken"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

func (g *gateway) domain() *string {
	if g.cfg.Domain == "" {
		return nil
	}
	d := g.cfg.Domain
	return &d
}

func (g *gateway) sandboxOf(l nodeapi.Sandbox) sandboxJSON {
	s := sandboxJSON{
		TemplateID: l.Template, SandboxID: RenderID(l.ID), ClientID: l.Node, Alias: l.Template,
		EnvdVersion: g.cfg.EnvdVersion, Domain: g.domain(),
	}
	if l.Token != "" {
		t, tt := l.Token, TrafficToken(l.Token)
		s.EnvdAccessToken, s.TrafficAccessToken = &t, &tt
	}
	return s
}

// listedJSON is e2b's ListedSandbox; detailJSON its SandboxDetail.
type listedJSON struct {
	TemplateID   string            `json:"templateID"`
	Alias        string            `json:"alias"`
	SandboxID    string            `json:"sandboxID"`
	ClientID     string            `json:"clientID"`
	StartedAt    string            `json:"startedAt"`
	EndAt        string            `json:"endAt"`
	CPUCount     int               `json:"cpuCount"`
	MemoryMB     int               `json:"memoryMB"`
	DiskSizeMB   int               `json:"diskSizeMB"`
	Metadata     map[string]string `json:"metadata"`
	State        string            `json:"state"`
	EnvdVersion  string            `json:"envdVersion"`
	VolumeMounts []any             `json:"volumeMounts"`
}

type detailJSON struct {
	listedJSON
	EnvdAccessToken     *string   `json:"envdAccessToken,omitempty"`
	Domain              *string   `json:"domain"`
	AllowInternetAccess bool      `json:"allowInternetAccess"`
	Lifecycle           lifecycle `json:"lifecycle"`
}

type lifecycle struct {
	OnTimeout  string `json:"onTimeout"`
	AutoResume bool   `json:"autoResume"`
}

// sizeShape is a size class's shape in the one table every backend boots
// with (pool.Shapes): what e2b reports as cpuCount and memoryMB. An
// unknown class reports small's.
func sizeShape(size string) (cpus, memMB int) {
	s, ok := pool.ShapeOf(size)
	if !ok {
		s, _ = pool.ShapeOf("")
	}
	return s.VCPUs, s.MemoryMiB
}

// timeLayout is RFC 3339 with milliseconds, always three digits: what
// e2b serves and JavaScript's Date keeps.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(timeLayout)
}

func (g *gateway) listedOf(l nodeapi.Sandbox) listedJSON {
	cpus, mem := sizeShape(l.Size)
	state := "running"
	if l.Paused {
		state = "paused"
	}
	md := l.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return listedJSON{
		TemplateID: l.Template, Alias: l.Template, SandboxID: RenderID(l.ID), ClientID: l.Node,
		StartedAt: rfc3339(l.ClaimedAt), EndAt: rfc3339(l.Deadline), CPUCount: cpus, MemoryMB: mem,
		Metadata: md, State: state, EnvdVersion: g.cfg.EnvdVersion, VolumeMounts: []any{},
	}
}

// newClaimName returns "e2b-" and 10 random lowercase alphanumerics.
func newClaimName() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return "e2b-" + string(b)
}

type createRequest struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	// AutoPause (the SDK's lifecycle.onTimeout "pause") pauses the
	// sandbox at its timeout instead of killing it.
	AutoPause *bool `json:"autoPause"`
	// AutoPauseMemory false makes that pause one without memory (file
	// system only).
	AutoPauseMemory *bool `json:"autoPauseMemory"`
	// AutoResume resumes an auto-paused sandbox on its next data-plane
	// request.
	AutoResume *struct {
		Enabled bool `json:"enabled"`
	} `json:"autoResume"`
	// Network.AllowPublicTraffic false opens the sandbox's ports (other
	// than envd's) only to its traffic access token; absent or true, they
	// are public, as on e2b.
	Network *struct {
		AllowPublicTraffic *bool `json:"allowPublicTraffic"`
	} `json:"network"`
}

// lifecycleOf is the node lifecycle a create asks for.
func lifecycleOf(req createRequest) (nodeapi.Lifecycle, error) {
	var l nodeapi.Lifecycle
	if req.AutoPause != nil && *req.AutoPause {
		l.OnTimeout = nodeapi.OnTimeoutPause
	}
	if req.AutoPauseMemory != nil && !*req.AutoPauseMemory && l.OnTimeout == nodeapi.OnTimeoutPause {
		l.PauseWithoutMemory = true
	}
	if req.AutoResume != nil && req.AutoResume.Enabled {
		if l.OnTimeout != nodeapi.OnTimeoutPause {
			return l, errors.New("autoResume can only be enabled with autoPause")
		}
		if l.PauseWithoutMemory {
			return l, errors.New("autoResume cannot be enabled with autoPauseMemory false: a pause without memory is resumed by connect")
		}
		l.AutoResume = true
	}
	// Public ports are e2b's default, and only an e2b create's.
	if req.Network != nil && req.Network.AllowPublicTraffic != nil && !*req.Network.AllowPublicTraffic {
		l.PrivateTraffic = true
	} else {
		l.PublicTraffic = true
	}
	return l, nil
}

// e2b's own lease bounds, when neither Config nor any node gives one: a
// create's default timeout and the largest (24 hours).
const (
	e2bDefaultTimeoutSeconds = 300
	e2bMaxTimeoutSeconds     = 24 * 60 * 60
)

// leaseBoundsTTL is how long the nodes' lease bounds are kept before they
// are asked again.
const leaseBoundsTTL = time.Minute

// leaseBounds are the default and the largest timeout a create, fork,
// connect or setTimeout may ask: Config's where set, else the nodes'
// (Fleet.LeaseBounds, the strictest node's, asked at most once per
// leaseBoundsTTL), else e2b's; the default never exceeds the largest.
func (g *gateway) leaseBounds(ctx context.Context) (def, max int64) {
	def, max = g.cfg.DefaultTimeoutSeconds, g.cfg.MaxTimeoutSeconds
	if def <= 0 || max <= 0 {
		nd, nm := g.nodeLeaseBounds(ctx)
		if def <= 0 {
			def = nd
		}
		if max <= 0 {
			max = nm
		}
	}
	if max <= 0 {
		max = e2bMaxTimeoutSeconds
	}
	if def <= 0 {
		def = e2bDefaultTimeoutSeconds
	}
	return min(def, max), max
}

// nodeLeaseBounds is Fleet.LeaseBounds, kept for leaseBoundsTTL.
func (g *gateway) nodeLeaseBounds(ctx context.Context) (def, max int64) {
	g.leaseMu.Lock()
	fresh := !g.leaseAt.IsZero() && time.Since(g.leaseAt) < leaseBoundsTTL
	def, max = g.leaseDef, g.leaseMax
	g.leaseMu.Unlock()
	if fresh {
		return def, max
	}
	def, max, _ = g.fleet.LeaseBounds(ctx)
	g.leaseMu.Lock()
	g.leaseDef, g.leaseMax, g.leaseAt = def, max, time.Now()
	g.leaseMu.Unlock()
	return def, max
}

// leaseSeconds is the lease a create or fork asks for: timeout when it is
// positive, else the default (leaseBounds); ok is false for a negative
// timeout.
func (g *gateway) leaseSeconds(ctx context.Context, timeout *int64) (ttl int64, ok bool) {
	if timeout == nil || *timeout == 0 {
		def, _ := g.leaseBounds(ctx)
		return def, true
	}
	return *timeout, *timeout > 0
}

// tooLong answers 400 when an asked timeout exceeds the largest
// (leaseBounds; like e2b, rather than the node clamping it silently) and
// reports whether it did.
func (g *gateway) tooLong(w http.ResponseWriter, r *http.Request, timeout *int64) bool {
	if timeout == nil {
		return false
	}
	if _, max := g.leaseBounds(r.Context()); *timeout > max {
		writeError(w, http.StatusBadRequest, "timeout cannot be greater than %d seconds (the nodes' longest lease), got %d", max, *timeout)
		return true
	}
	return false
}

// Limits on what a create carries (the body as a whole is bounded by
// maxBodyBytes).
const (
	maxTemplateIDLen = 512
	maxEnvBytes      = 64 << 10 // names and values of envVars, summed
	maxEnvVars       = 1000
)

// validateCreate checks a create's fields before anything is claimed.
func validateCreate(req createRequest) error {
	id := req.TemplateID
	if strings.TrimSpace(id) == "" {
		return errors.New("templateID is required")
	}
	if len(id) > maxTemplateIDLen || strings.IndexFunc(id, unicode.IsControl) >= 0 || !utf8.ValidString(id) {
		return fmt.Errorf("templateID %.64q is not a valid template or snapshot id", id)
	}
	if len(req.EnvVars) > maxEnvVars {
		return fmt.Errorf("envVars has %d entries (at most %d)", len(req.EnvVars), maxEnvVars)
	}
	n := 0
	for k, v := range req.EnvVars {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return fmt.Errorf("envVars name %.64q is invalid", k)
		}
		n += len(k) + len(v)
	}
	if n > maxEnvBytes {
		return fmt.Errorf("envVars total %d bytes (at most %d)", n, maxEnvBytes)
	}
	// The node's bounds (nodeapi.MaxMetadataKeys, MaxMetadataBytes), as 400.
	if len(req.Metadata) > nodeapi.MaxMetadataKeys {
		return fmt.Errorf("metadata has %d keys (at most %d)", len(req.Metadata), nodeapi.MaxMetadataKeys)
	}
	if _, ok := req.Metadata[""]; ok {
		return errors.New("metadata has an empty key")
	}
	if n := nodeapi.MetadataBytes(req.Metadata); n > nodeapi.MaxMetadataBytes {
		return fmt.Errorf("metadata total %d bytes (at most %d)", n, nodeapi.MaxMetadataBytes)
	}
	return nil
}

func (g *gateway) handleCreate(w http.ResponseWriter, r *http.Request) {
	var req createRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if err := validateCreate(req); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	ttl, ok := g.leaseSeconds(r.Context(), req.Timeout)
	if !ok {
		writeError(w, http.StatusBadRequest, "timeout must be >= 0, got %d", *req.Timeout)
		return
	}
	if g.tooLong(w, r, req.Timeout) {
		return
	}
	life, err := lifecycleOf(req)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	// The key's namespace; labelled for e2b, which makes the node record
	// the claim as e2b's (visible; nodeapi.Lifecycle.E2B), as its fork
	// children and snapshot clones are. The label stays for display.
	freq := fleet.Request{TTLSeconds: ttl, Ref: g.namespaceOf(r.Context()) + "/" + newClaimName(), Env: req.EnvVars, Metadata: req.Metadata, Lifecycle: life,
		Object: nodeapi.Object{Labels: map[string]string{sandbox.LabelE2B: "true"}}}
	if !isSnapshotID(req.TemplateID) {
		allow := req.AllowInternetAccess != nil && *req.AllowInternetAccess
		freq.Key, err = pool.KeyForE2B(g.template(r.Context(), req.TemplateID), allow)
		if err != nil {
			writeError(w, http.StatusBadRequest, "%v", err)
			return
		}
	}
	// The claim runs to its outcome even if the client goes away, and what
	// a client gone will never learn of is released (fleet.Detached).
	sbs, err := fleet.Detached(r.Context(), g.fleet, func(ctx context.Context) ([]nodeapi.Sandbox, error) {
		s, err := g.claim(ctx, req.TemplateID, freq)
		if err != nil {
			return nil, err
		}
		return []nodeapi.Sandbox{s}, nil
	})
	var unknown *unknownTemplate
	switch {
	case errors.Is(err, fleet.ErrAbandoned):
		return
	case errors.As(err, &unknown):
		writeError(w, http.StatusNotFound, "%v", unknown)
		return
	case err != nil:
		fail(w, err, "template "+strconv.Quote(req.TemplateID))
		return
	}
	g.unmiss(sbs[0])
	writeJSON(w, http.StatusCreated, g.sandboxOf(sbs[0]))
}

// unknownTemplate is a create's templateID that no node has a pool of, no
// alias names and no snapshot the key sees goes by (a 404).
type unknownTemplate struct{ id, known string }

func (e *unknownTemplate) Error() string {
	return fmt.Sprintf("template %q not found: %s", e.id, e.known)
}

// claim claims a create's sandbox: a clone of the snapshot id names, else
// one of req.Key's pool, else a clone of the snapshot named id.
func (g *gateway) claim(ctx context.Context, id string, req fleet.Request) (nodeapi.Sandbox, error) {
	if isSnapshotID(id) {
		return g.claimSnapshot(ctx, id, req)
	}
	s, err := g.fleet.Claim(ctx, req)
	var noCap *fleet.ErrNoWarmCapacity
	if !errors.As(err, &noCap) || g.isPool(ctx, req.Key) {
		return s, err
	}
	// Not a template any node serves: a snapshot may go by its name.
	snap, ok := g.snapshotNamed(ctx, id)
	if !ok {
		return nodeapi.Sandbox{}, &unknownTemplate{id: id, known: g.knownTemplates(ctx)}
	}
	return g.cloneSnapshot(ctx, snap, req)
}

// releaseOrphans releases sandboxes claimed for a create that fails after
// the claim, on a context of their own.
func (g *gateway) releaseOrphans(ctx context.Context, sbs ...nodeapi.Sandbox) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fleet.ClaimTimeout)
	defer cancel()
	for _, s := range sbs {
		_ = g.fleet.Release(ctx, s)
	}
}

// isPool reports whether some node advertises a pool of k's template (from
// the view: no node call), so a 503 for it is only a capacity shortage.
func (g *gateway) isPool(ctx context.Context, k pool.Key) bool {
	pools, err := g.fleet.Pools(ctx)
	if err != nil {
		return true // do not widen a failure into a fan-out
	}
	for _, p := range pools {
		if p.Template == k.Template {
			return true
		}
	}
	return false
}

// knownTemplates names what a create may ask for: the templates some
// node has a pool of, and the aliases (at most 20 of each).
func (g *gateway) knownTemplates(ctx context.Context) string {
	seen := map[string]bool{}
	var tpls []string
	if pools, err := g.fleet.Pools(ctx); err == nil {
		for _, p := range pools {
			if p.Template != "" && !seen[p.Template] {
				seen[p.Template] = true
				tpls = append(tpls, strconv.Quote(p.Template))
			}
		}
	}
	var aliases []string
	for a, t := range g.aliases {
		if t != "" {
			aliases = append(aliases, strconv.Quote(a)+" → "+strconv.Quote(t))
		}
	}
	sort.Strings(tpls)
	sort.Strings(aliases)
	list := func(xs []string) string {
		if len(xs) == 0 {
			return "none"
		}
		if len(xs) > 20 {
			return strings.Join(xs[:20], ", ") + fmt.Sprintf(" and %d more", len(xs)-20)
		}
		return strings.Join(xs, ", ")
	}
	return "the templates are " + list(tpls) + "; the aliases are " + list(aliases) + "; or a snapshot of the namespace by id or name"
}

// template resolves a create's templateID: an alias (Config.TemplateAliases,
// e.g. @e2b/code-interpreter's default "code-interpreter-v1") names its
// target unless some node serves a pool of the alias itself.
func (g *gateway) template(ctx context.Context, id string) string {
	target, ok := g.aliases[id]
	if !ok || target == "" || g.isPool(ctx, pool.Key{Template: id}) {
		return id
	}
	return target
}

// isSnapshotID reports whether a templateID names a snapshot by id (the
// node's "sn_…", or its DNS-safe rendering).
func isSnapshotID(id string) bool {
	return strings.HasPrefix(id, "sn_") || strings.HasPrefix(id, "sn-")
}

// snapshots lists the snapshots the request's key sees: its namespace's
// taken of a sandbox the key saw (nodeapi.Snapshot.E2B). A snapshot of
// another sandbox of the namespace (Kubernetes' sandboxes/snapshot) is
// not the key's to list, clone — a clone's memory may hold its source's
// token — or delete.
func (g *gateway) snapshots(ctx context.Context) ([]nodeapi.Snapshot, error) {
	all, err := g.fleet.Snapshots(ctx)
	if err != nil {
		return nil, err
	}
	ns := g.namespaceOf(ctx)
	out := all[:0:0]
	for _, c := range all {
		if c.Namespace == ns && c.E2B {
			out = append(out, c)
		}
	}
	return out, nil
}

// snapshotByID finds a snapshot the key sees (snapshots) by id (either
// spelling).
func (g *gateway) snapshotByID(ctx context.Context, id string) (nodeapi.Snapshot, error) {
	snaps, err := g.snapshots(ctx)
	if err != nil {
		return nodeapi.Snapshot{}, err
	}
	for _, c := range snaps {
		if MatchID(c.ID, id) {
			return c, nil
		}
	}
	return nodeapi.Snapshot{}, fleet.ErrNotFound
}

// snapshotNamed finds the newest snapshot the key sees (snapshots) named
// name.
func (g *gateway) snapshotNamed(ctx context.Context, name string) (nodeapi.Snapshot, bool) {
	snaps, err := g.snapshots(ctx)
	if err != nil {
		return nodeapi.Snapshot{}, false
	}
	for _, c := range snaps { // newest first
		if c.Name == name {
			return c, true
		}
	}
	return nodeapi.Snapshot{}, false
}

// claimSnapshot starts a sandbox from the namespace's snapshot id, on the
// node holding it.
func (g *gateway) claimSnapshot(ctx context.Context, id string, req fleet.Request) (nodeapi.Sandbox, error) {
	snap, err := g.snapshotByID(ctx, id)
	if err != nil {
		return nodeapi.Sandbox{}, err
	}
	return g.cloneSnapshot(ctx, snap, req)
}

// cloneSnapshot claims a clone of snap — e2b's like the snapshot
// (nodeapi.Lifecycle.E2B, which the node gives the clone) — and records
// req.Object's labels on it (a node records no object with a snapshot
// claim), so that it is labelled like any e2b create; a clone that cannot
// be labelled is released and the create fails.
func (g *gateway) cloneSnapshot(ctx context.Context, snap nodeapi.Snapshot, req fleet.Request) (nodeapi.Sandbox, error) {
	s, err := g.fleet.ClaimSnapshot(ctx, snap, req)
	if err != nil || len(req.Object.Labels) == 0 || s.Labels[sandbox.LabelE2B] == req.Object.Labels[sandbox.LabelE2B] {
		return s, err
	}
	labels := map[string]string{}
	for k, v := range s.Labels {
		labels[k] = v
	}
	for k, v := range req.Object.Labels {
		labels[k] = v
	}
	labelled, err := g.fleet.SetLabels(ctx, s, nodeapi.LabelsRequest{Labels: labels, Annotations: s.Annotations, Version: s.Version})
	if err != nil {
		g.releaseOrphans(ctx, s)
		return nodeapi.Sandbox{}, fmt.Errorf("labelling the clone of snapshot %s: %w", snap.ID, err)
	}
	if labelled.Token == "" {
		labelled.Token = s.Token
	}
	return labelled, nil
}

// view returns every sandbox the request's key sees (visible) that the
// fleet lists (published or claimed through the fleet and not published yet).
func (g *gateway) view(ctx context.Context) ([]nodeapi.Sandbox, error) {
	all, err := g.fleet.List(ctx)
	if err != nil {
		return nil, err
	}
	ns := g.namespaceOf(ctx)
	seen := map[string]bool{}
	out := make([]nodeapi.Sandbox, 0, len(all))
	for _, s := range all {
		if visible(ns, s) && !seen[s.ID] {
			seen[s.ID] = true
			out = append(out, s)
		}
	}
	return out, nil
}

func (g *gateway) handleList(w http.ResponseWriter, r *http.Request) {
	q, err := parseListQuery(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	g.serveList(w, r, q)
}

// handleListV1 is the v1 list: running sandboxes, metadata filter only.
func (g *gateway) handleListV1(w http.ResponseWriter, r *http.Request) {
	md, err := DecodeMetadataQuery(r.URL.Query().Get("metadata"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	g.serveList(w, r, listQuery{States: map[string]bool{"running": true}, Metadata: md, Limit: maxListLimit})
}

func (g *gateway) serveList(w http.ResponseWriter, r *http.Request, q listQuery) {
	locs, err := g.view(r.Context())
	if err != nil {
		fail(w, err, "sandboxes")
		return
	}
	items := make([]listItem, len(locs))
	byID := make(map[string]nodeapi.Sandbox, len(locs))
	for i, l := range locs {
		id := RenderID(l.ID)
		items[i] = listItem{ID: id, Template: l.Template, Paused: l.Paused, StartedAt: l.ClaimedAt, Metadata: l.Metadata}
		byID[id] = l
	}
	page, next := pageList(items, q)
	out := make([]listedJSON, 0, len(page))
	for _, it := range page {
		out = append(out, g.listedOf(byID[it.ID]))
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	writeJSON(w, http.StatusOK, out)
}

// live asks the node whether s is paused (the view may be stale).
func (g *gateway) live(ctx context.Context, s nodeapi.Sandbox) (bool, error) {
	st, err := g.fleet.Stats(ctx, s)
	if err != nil {
		return false, err
	}
	return st.Paused, nil
}

// failSandbox maps err about the request's sandbox {id} to an e2b error answer.
func failSandbox(w http.ResponseWriter, r *http.Request, err error) {
	fail(w, err, "sandbox "+strconv.Quote(r.PathValue("id")))
}

// sandboxFor resolves the request's {id}; on failure it writes the error
// answer and returns false.
func (g *gateway) sandboxFor(w http.ResponseWriter, r *http.Request) (nodeapi.Sandbox, bool) {
	s, err := g.lookup(r.Context(), r.PathValue("id"))
	if err != nil {
		failSandbox(w, r, err)
		return nodeapi.Sandbox{}, false
	}
	return s, true
}

// pausedFor asks s's node whether it is paused; on failure it writes the
// error answer and returns ok false.
func (g *gateway) pausedFor(w http.ResponseWriter, r *http.Request, s nodeapi.Sandbox) (paused, ok bool) {
	paused, err := g.live(r.Context(), s)
	if err != nil {
		failSandbox(w, r, err)
		return false, false
	}
	return paused, true
}

func (g *gateway) handleGet(w http.ResponseWriter, r *http.Request) {
	s, ok := g.sandboxFor(w, r)
	if !ok {
		return
	}
	if p, err := g.live(r.Context(), s); err == nil {
		s.Paused = p
	}
	d := detailJSON{
		listedJSON: g.listedOf(s), Domain: g.domain(),
		AllowInternetAccess: s.Net == sandbox.NetEgress, Lifecycle: lifecycle{OnTimeout: nodeapi.OnTimeoutKill, AutoResume: s.AutoResume},
	}
	if s.OnTimeout == nodeapi.OnTimeoutPause {
		d.Lifecycle.OnTimeout = nodeapi.OnTimeoutPause
	}
	if s.Token != "" {
		t := s.Token
		d.EnvdAccessToken = &t
	}
	writeJSON(w, http.StatusOK, d)
}

func (g *gateway) handleKill(w http.ResponseWriter, r *http.Request) {
	s, ok := g.sandboxFor(w, r)
	if !ok {
		return
	}
	g.forget(s)
	if err := g.fleet.Release(r.Context(), s); err != nil {
		failSandbox(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

type timeoutRequest struct {
	Timeout *int64 `json:"timeout"`
}

func (g *gateway) handleTimeout(w http.ResponseWriter, r *http.Request) {
	var req timeoutRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if req.Timeout == nil || *req.Timeout < 0 {
		writeError(w, http.StatusBadRequest, "timeout (seconds, >= 0) is required")
		return
	}
	if g.tooLong(w, r, req.Timeout) {
		return
	}
	s, ok := g.sandboxFor(w, r)
	if !ok {
		return
	}
	if _, err := g.fleet.Renew(r.Context(), s, *req.Timeout); err != nil {
		failSandbox(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (g *gateway) handleRefresh(w http.ResponseWriter, r *http.Request) {
	if _, ok := g.sandboxFor(w, r); !ok {
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (g *gateway) handlePause(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Memory *bool `json:"memory"`
	}
	if !decodeBody(w, r, &req) {
		return
	}
	s, ok := g.sandboxFor(w, r)
	if !ok {
		return
	}
	paused, ok := g.pausedFor(w, r, s)
	if !ok {
		return
	}
	if paused {
		writeError(w, http.StatusConflict, "sandbox %q is already paused", r.PathValue("id"))
		return
	}
	// {"memory": false} (the SDK's keepMemory: false) keeps only the file
	// system: the VM stops, and a resume restarts it from its disk.
	g.dropRoute(s.ID)
	pause := g.fleet.Pause
	if req.Memory != nil && !*req.Memory {
		pause = g.fleet.PauseWithoutMemory
	}
	if err := pause(r.Context(), s); err != nil {
		failSandbox(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (g *gateway) handleConnect(w http.ResponseWriter, r *http.Request) {
	var req timeoutRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if req.Timeout != nil && *req.Timeout < 0 {
		writeError(w, http.StatusBadRequest, "timeout must be >= 0")
		return
	}
	if g.tooLong(w, r, req.Timeout) {
		return
	}
	s, ok := g.sandboxFor(w, r)
	if !ok {
		return
	}
	paused, ok := g.pausedFor(w, r, s)
	if !ok {
		return
	}
	status := http.StatusOK
	if paused {
		if err := g.fleet.Resume(r.Context(), s); err != nil {
			failSandbox(w, r, err)
			return
		}
		g.dropRoute(s.ID)
		status = http.StatusCreated
	}
	// A connect timeout only extends the lease.
	if req.Timeout != nil && *req.Timeout > 0 && g.now().Add(time.Duration(*req.Timeout)*time.Second).After(s.Deadline) {
		if _, err := g.fleet.Renew(r.Context(), s, *req.Timeout); err != nil {
			failSandbox(w, r, err)
			return
		}
	}
	writeJSON(w, status, g.sandboxOf(s))
}

func (g *gateway) handleFork(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Timeout *int64 `json:"timeout"`
		Count   *int   `json:"count"`
	}
	if !decodeBody(w, r, &req) {
		return
	}
	count := 1
	if req.Count != nil {
		count = *req.Count
	}
	// More than a node forks in one call is a 400 naming the bound, before
	// any node call, not the node's refusal.
	if count < 1 || count > nodeapi.MaxForkCount {
		writeError(w, http.StatusBadRequest, "count must be in [1, %d] (a node forks at most %d children in one call), got %d", nodeapi.MaxForkCount, nodeapi.MaxForkCount, count)
		return
	}
	ttl, ok := g.leaseSeconds(r.Context(), req.Timeout)
	if !ok {
		writeError(w, http.StatusBadRequest, "timeout must be >= 0")
		return
	}
	if g.tooLong(w, r, req.Timeout) {
		return
	}
	s, ok := g.sandboxFor(w, r)
	if !ok {
		return
	}
	if paused, ok := g.pausedFor(w, r, s); !ok {
		return
	} else if paused {
		writeError(w, http.StatusConflict, "sandbox %q is paused and cannot be forked; connect (resume) it first", r.PathValue("id"))
		return
	}
	// As a create's: detached, and released if the client is gone.
	children, err := fleet.Detached(r.Context(), g.fleet, func(ctx context.Context) ([]nodeapi.Sandbox, error) {
		return g.fleet.Fork(ctx, s, count, ttl)
	})
	if errors.Is(err, fleet.ErrAbandoned) {
		return
	}
	if err != nil {
		failSandbox(w, r, err)
		return
	}
	out := make([]map[string]any, 0, len(children))
	for _, c := range children {
		out = append(out, map[string]any{"sandbox": g.sandboxOf(c)})
	}
	writeJSON(w, http.StatusOK, out)
}

type snapshotJSON struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

func snapshotOf(c nodeapi.Snapshot) snapshotJSON {
	s := snapshotJSON{SnapshotID: c.ID, Names: []string{}}
	if c.Name != "" {
		s.Names = append(s.Names, c.Name)
	}
	return s
}

func (g *gateway) handleSnapshot(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name string `json:"name"`
	}
	if !decodeBody(w, r, &req) {
		return
	}
	s, ok := g.sandboxFor(w, r)
	if !ok {
		return
	}
	c, err := g.fleet.Snapshot(r.Context(), s, req.Name)
	if err != nil {
		failSandbox(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, snapshotOf(c))
}

func (g *gateway) handleListSnapshots(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := maxListLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxListLimit {
			writeError(w, http.StatusBadRequest, "limit %q must be an integer in [1, %d]", s, maxListLimit)
			return
		}
		limit = n
	}
	cps, err := g.snapshots(r.Context())
	if err != nil {
		fail(w, err, "snapshots")
		return
	}
	sbx, name, after := q.Get("sandboxID"), q.Get("name"), q.Get("nextToken")
	sort.Slice(cps, func(i, j int) bool { return cps[i].ID < cps[j].ID })
	out := []snapshotJSON{}
	next := ""
	for _, c := range cps {
		if sbx != "" && !MatchID(c.SandboxID, sbx) || name != "" && c.Name != name || after != "" && c.ID <= after {
			continue
		}
		if len(out) == limit {
			next = out[len(out)-1].SnapshotID
			break
		}
		out = append(out, snapshotOf(c))
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	writeJSON(w, http.StatusOK, out)
}

func (g *gateway) handleDeleteSnapshot(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	snap, err := g.snapshotByID(r.Context(), id)
	if err == nil {
		err = g.fleet.DeleteSnapshot(r.Context(), snap.ID)
	}
	if err != nil {
		fail(w, err, "snapshot "+strconv.Quote(id))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

type metricJSON struct {
	Timestamp     string  `json:"timestamp"`
	TimestampUnix int64   `json:"timestampUnix"`
	CPUCount      int     `json:"cpuCount"`
	CPUUsedPct    float64 `json:"cpuUsedPct"`
	MemUsed       int64   `json:"memUsed"`
	MemTotal      int64   `json:"memTotal"`
	MemCache      int64   `json:"memCache"`
	DiskUsed      int64   `json:"diskUsed"`
	DiskTotal     int64   `json:"diskTotal"`
}

// metricsRange decodes getMetrics' optional start and end (unix seconds,
// inclusive).
func metricsRange(q url.Values) (start, end int64, err error) {
	start, end = math.MinInt64, math.MaxInt64
	for _, b := range []struct {
		name string
		to   *int64
	}{{"start", &start}, {"end", &end}} {
		if v := q.Get(b.name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return 0, 0, fmt.Errorf("%s %q is not a unix time in seconds", b.name, v)
			}
			*b.to = n
		}
	}
	if end < start {
		return 0, 0, fmt.Errorf("end %d is before start %d", end, start)
	}
	return start, end, nil
}

// handleMetrics answers the sandbox's metrics in [start, end]: the node
// measures on demand, so the one sample is now's, and a range that does
// not hold now is an empty list.
func (g *gateway) handleMetrics(w http.ResponseWriter, r *http.Request) {
	start, end, err := metricsRange(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	s, ok := g.sandboxFor(w, r)
	if !ok {
		return
	}
	st, err := g.fleet.Stats(r.Context(), s)
	if err != nil {
		failSandbox(w, r, err)
		return
	}
	at := st.MeasuredAt
	if at.IsZero() {
		at = g.now()
	}
	out := []metricJSON{}
	if at.Unix() >= start && at.Unix() <= end {
		out = append(out, metricJSON{
			Timestamp: rfc3339(at), TimestampUnix: at.Unix(), CPUCount: st.CPUCount,
			MemUsed: st.MemUsedBytes, MemTotal: st.MemTotalBytes,
			DiskUsed: st.DiskUsedBytes, DiskTotal: st.DiskTotalBytes,
		})
	}
	writeJSON(w, http.StatusOK, out)
}

type templateJSON struct {
	TemplateID  string   `json:"templateID"`
	BuildID     string   `json:"buildID"`
	CPUCount    int      `json:"cpuCount"`
	MemoryMB    int      `json:"memoryMB"`
	DiskSizeMB  int      `json:"diskSizeMB"`
	Public      bool     `json:"public"`
	Aliases     []string `json:"aliases"`
	Names       []string `json:"names"`
	CreatedAt   string   `json:"createdAt"`
	UpdatedAt   string   `json:"updatedAt"`
	SpawnCount  int      `json:"spawnCount"`
	BuildCount  int      `json:"buildCount"`
	EnvdVersion string   `json:"envdVersion"`
}

func (g *gateway) handleTemplates(w http.ResponseWriter, r *http.Request) {
	type shape struct{ template, size string }
	var shapes []shape
	pools, err := g.fleet.Pools(r.Context())
	if err != nil {
		fail(w, err, "templates")
		return
	}
	for _, p := range pools {
		shapes = append(shapes, shape{p.Template, p.Size})
	}
	seen := map[string]bool{}
	out := []templateJSON{}
	for _, s := range shapes {
		if s.template == "" || seen[s.template] {
			continue
		}
		seen[s.template] = true
		cpus, mem := sizeShape(s.size)
		out = append(out, templateJSON{
			TemplateID: s.template, BuildID: s.template, CPUCount: cpus, MemoryMB: mem, Public: true,
			Aliases: []string{}, Names: []string{s.template}, EnvdVersion: g.cfg.EnvdVersion,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TemplateID < out[j].TemplateID })
	writeJSON(w, http.StatusOK, out)
}
