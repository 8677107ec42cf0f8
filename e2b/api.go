package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/egress"
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
	Claim(ctx context.Context, req nodeapi.ClaimRequest) (nodeapi.Sandbox, error)
	LiveByID(ctx context.Context, id string) (nodeapi.Sandbox, error)
	// KnownByID finds id through the fleet's index or view and asks only
	// the node they name (never a fan-out); ErrNotFound otherwise.
	KnownByID(ctx context.Context, id string) (nodeapi.Sandbox, error)
	// ViewByID is the live fleet view's record of id (no token), from
	// memory: no node call. The data plane checks every cached route
	// against it (cache.go), so a pause made elsewhere (the Kubernetes
	// API, another gateway replica) ends the route as soon as the view
	// has it.
	ViewByID(id string) (nodeapi.Sandbox, bool)
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
	// Logs reads s's log (the agent's, through its node).
	Logs(ctx context.Context, s nodeapi.Sandbox, q agentapi.LogsQuery) (agentapi.Logs, error)
	// ClaimSnapshot claims a new sandbox cloned from snap on the node
	// holding it, recorded under req.ClaimRef (its key and Object are ignored).
	ClaimSnapshot(ctx context.Context, snap nodeapi.Snapshot, req nodeapi.ClaimRequest) (nodeapi.Sandbox, error)
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
	m.HandleFunc("PUT /sandboxes/{id}/network", g.handleUpdateNetwork)
	m.HandleFunc("GET /snapshots", g.handleListSnapshots)
	m.HandleFunc("DELETE /templates/{id}", g.handleDeleteSnapshot)
	m.HandleFunc("GET /sandboxes/{id}/metrics", g.handleMetrics)
	m.HandleFunc("GET /sandboxes/{id}/logs", g.handleLogs)
	m.HandleFunc("GET /v2/sandboxes/{id}/logs", g.handleLogsV2)
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
	EnvdAccessToken     *string      `json:"envdAccessToken,omitempty"`
	Domain              *string      `json:"domain"`
	AllowInternetAccess bool         `json:"allowInternetAccess"`
	Network             *networkJSON `json:"network,omitempty"`
	Lifecycle           lifecycle    `json:"lifecycle"`
}

// networkJSON is e2b's SandboxNetworkConfig as a sandbox's detail reports
// it: the egress lists rendered back from the recorded policy (networkOf).
type networkJSON struct {
	AllowOut           []string `json:"allowOut,omitempty"`
	DenyOut            []string `json:"denyOut,omitempty"`
	AllowPublicTraffic bool     `json:"allowPublicTraffic"`
}

// networkOf is what a sandbox's detail reports of its network
// (docs/API.md#egress-policy): allowInternetAccess is the egress lane with
// nothing denied by default (a policy's Otherwise allow); allowOut and
// denyOut are the policy's allow and deny rules in order, a domain as the
// node matches it (lower case, no trailing dot), and e2b's ALL_TRAFFIC
// ("0.0.0.0/0") once for the 0.0.0.0/0 and ::/0 pair FromE2B makes of it
// (a rule with no destination, from another surface, is ALL_TRAFFIC too;
// its ports and excepts have no e2b form and are not shown).
func networkOf(s nodeapi.Sandbox) (internet bool, n *networkJSON) {
	internet = s.Net == sandbox.NetEgress
	n = &networkJSON{AllowPublicTraffic: !s.PrivateTraffic}
	p := s.Egress
	if p == nil {
		return internet, n
	}
	internet = internet && p.Otherwise == egress.Allow
	all := map[egress.Action]bool{}
	for _, r := range p.Rules {
		e := r.Domain
		switch {
		case r.Domain != "":
		case r.CIDR == "" || r.CIDR == egress.AllTraffic || r.CIDR == "::/0":
			if all[r.Action] {
				continue
			}
			all[r.Action], e = true, egress.AllTraffic
		default:
			e = r.CIDR
		}
		if r.Action == egress.Allow {
			n.AllowOut = append(n.AllowOut, e)
		} else {
			n.DenyOut = append(n.DenyOut, e)
		}
	}
	return internet, n
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
