package e2b

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hearthvm/hearth/claim"
	"github.com/hearthvm/hearth/node"
	"github.com/hearthvm/hearth/pool"
	"github.com/hearthvm/hearth/sandbox"
)

// recentClaim is a claim this gateway made (create or fork), remembered so
// lists show it before its node publishes and keep its metadata.
type recentClaim struct {
	loc claim.Located
	at  time.Time
}

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

// fail maps a fleet error to an e2b error answer.
func fail(w http.ResponseWriter, err error, what string) {
	var noCap *claim.ErrNoWarmCapacity
	switch {
	case errors.As(err, &noCap):
		writeError(w, http.StatusServiceUnavailable, "%s", err.Error())
	case errors.Is(err, claim.ErrNotFound) || node.StatusOf(err) == http.StatusNotFound:
		writeError(w, http.StatusNotFound, "%s not found", what)
	case errors.Is(err, pool.ErrInvalidKey):
		writeError(w, http.StatusBadRequest, "%s", err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		writeError(w, http.StatusGatewayTimeout, "%s: %v", what, err)
	default:
		switch s := node.StatusOf(err); s {
		case http.StatusBadRequest, http.StatusConflict:
			writeError(w, s, "%s: %v", what, err)
		case http.StatusTooManyRequests:
			writeError(w, http.StatusServiceUnavailable, "%s: %v", what, err)
		default:
			writeError(w, http.StatusInternalServerError, "%s: %v", what, err)
		}
	}
}

// decodeBody decodes an optional JSON body; empty is fine.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "reading the body: %v", err)
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

func (g *gateway) inNamespace(l claim.Located) bool {
	return strings.HasPrefix(l.ClaimRef, g.cfg.Namespace+"/")
}

// lookup resolves a client-supplied sandbox id (raw or rendered) through
// the fleet, live; only sandboxes in the gateway's namespace are visible.
func (g *gateway) lookup(ctx context.Context, given string) (claim.Located, error) {
	given = strings.TrimSpace(given)
	if given == "" {
		return claim.Located{}, claim.ErrNotFound
	}
	var cands []string
	g.mu.Lock()
	if rc, ok := g.recent[given]; ok {
		cands = append(cands, rc.loc.ID)
	}
	g.mu.Unlock()
	for _, c := range idCandidates(given) {
		if len(cands) == 0 || cands[0] != c {
			cands = append(cands, c)
		}
	}
	tried := map[string]bool{}
	try := func(id string) (claim.Located, bool, error) {
		tried[id] = true
		loc, err := g.fleet.ByID(ctx, id)
		if err == nil {
			if MatchID(loc.ID, given) && g.inNamespace(loc) {
				return g.withKnown(loc), true, nil
			}
			return loc, false, nil
		}
		if errors.Is(err, claim.ErrNotFound) || node.StatusOf(err) == http.StatusNotFound {
			return loc, false, nil
		}
		return loc, false, err
	}
	for _, c := range cands {
		if loc, ok, err := try(c); ok || err != nil {
			return loc, err
		}
	}
	// An id in a spelling we cannot invert: scan the view.
	all, err := g.fleet.List(ctx)
	if err != nil {
		return claim.Located{}, err
	}
	for _, l := range all {
		if !tried[l.ID] && MatchID(l.ID, given) {
			if loc, ok, err := try(l.ID); ok || err != nil {
				return loc, err
			}
		}
	}
	return claim.Located{}, claim.ErrNotFound
}

// withKnown fills what the fleet's answer may lack (template, metadata)
// from a claim made here.
func (g *gateway) withKnown(l claim.Located) claim.Located {
	g.mu.Lock()
	rc, ok := g.recent[RenderID(l.ID)]
	g.mu.Unlock()
	if !ok {
		return l
	}
	if l.Template == "" {
		l.Template = rc.loc.Template
	}
	if l.Metadata == nil {
		l.Metadata = rc.loc.Metadata
	}
	if l.Token == "" {
		l.Token = rc.loc.Token
	}
	return l
}

// maxRecent is the size past which remember drops records whose lease
// (as last granted through this gateway) has ended.
const maxRecent = 4096

func (g *gateway) remember(l claim.Located) {
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.recent[RenderID(l.ID)] = recentClaim{loc: l, at: now}
	if len(g.recent) > maxRecent {
		for k, rc := range g.recent {
			if !rc.loc.Deadline.IsZero() && now.After(rc.loc.Deadline) {
				delete(g.recent, k)
			}
		}
	}
}

// renewed records a new deadline granted through this gateway.
func (g *gateway) renewed(l claim.Located, deadline time.Time) {
	g.mu.Lock()
	if rc, ok := g.recent[RenderID(l.ID)]; ok {
		rc.loc.Deadline = deadline
		g.recent[RenderID(l.ID)] = rc
	}
	g.mu.Unlock()
}

func (g *gateway) forget(l claim.Located) {
	g.mu.Lock()
	delete(g.recent, RenderID(l.ID))
	for k, rt := range g.routes {
		if rt.id == l.ID {
			delete(g.routes, k)
		}
	}
	g.mu.Unlock()
}

func located(d claim.Delivery, template, ref, net string, metadata map[string]string) claim.Located {
	tpl := d.Template
	if tpl == "" {
		tpl = template
	}
	cref := d.ClaimRef
	if cref == "" {
		cref = ref
	}
	return claim.Located{
		Sandbox: node.Sandbox{
			ID: d.ID, Template: tpl, Net: net, Size: sandbox.SizeSmall, ClaimRef: cref,
			Addr: d.OwnerAddr, Deadline: d.Deadline, ClaimedAt: d.ClaimedAt, Metadata: metadata,
			Token: d.Token, Node: d.Node,
		},
		Node: d.Node, NodeAddr: d.NodeAddr,
	}
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

func (g *gateway) sandboxOf(l claim.Located) sandboxJSON {
	s := sandboxJSON{
		TemplateID: l.Template, SandboxID: RenderID(l.ID), ClientID: l.Node, Alias: l.Template,
		EnvdVersion: g.cfg.EnvdVersion, Domain: g.domain(),
	}
	if l.Token != "" {
		t := l.Token
		s.EnvdAccessToken = &t
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

// sizeShape is the nominal (upper bound) shape of a size class.
func sizeShape(size string) (cpus, memMB int) {
	switch size {
	case sandbox.SizeLarge:
		return 8, 16384
	case sandbox.SizeMedium:
		return 4, 8192
	}
	return 1, 2048
}

func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

func (g *gateway) listedOf(l claim.Located) listedJSON {
	cpus, mem := sizeShape(l.Size)
	state := "running"
	if l.Hibernated {
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
}

// leaseSeconds is the lease a create or fork asks for: timeout when it is
// positive, else the default; ok is false for a negative timeout.
func (g *gateway) leaseSeconds(timeout *int64) (ttl int64, ok bool) {
	if timeout == nil || *timeout == 0 {
		return g.cfg.DefaultTimeoutSeconds, true
	}
	return *timeout, *timeout > 0
}

func (g *gateway) handleCreate(w http.ResponseWriter, r *http.Request) {
	var req createRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if strings.TrimSpace(req.TemplateID) == "" {
		writeError(w, http.StatusBadRequest, "templateID is required")
		return
	}
	ttl, ok := g.leaseSeconds(req.Timeout)
	if !ok {
		writeError(w, http.StatusBadRequest, "timeout must be >= 0, got %d", *req.Timeout)
		return
	}
	allow := req.AllowInternetAccess != nil && *req.AllowInternetAccess
	key, err := pool.KeyForE2B(req.TemplateID, allow)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	ref := g.cfg.Namespace + "/" + newClaimName()
	d, err := g.fleet.Claim(r.Context(), claim.Request{
		Key: key, TTLSeconds: ttl, Ref: ref, Env: req.EnvVars, Metadata: req.Metadata,
	})
	if err != nil {
		fail(w, err, "template "+strconv.Quote(req.TemplateID))
		return
	}
	loc := located(d, key.Template, ref, key.Net, req.Metadata)
	g.remember(loc)
	writeJSON(w, http.StatusCreated, g.sandboxOf(loc))
}

// view returns every sandbox of the namespace: the fleet's view merged
// with claims made here that are not published yet (verified live).
func (g *gateway) view(ctx context.Context) ([]claim.Located, error) {
	all, err := g.fleet.List(ctx)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	out := make([]claim.Located, 0, len(all))
	for _, l := range all {
		if !g.inNamespace(l) || seen[l.ID] {
			continue
		}
		seen[l.ID] = true
		out = append(out, g.withKnown(l))
	}
	g.mu.Lock()
	var pending []recentClaim
	for _, rc := range g.recent {
		if !seen[rc.loc.ID] {
			pending = append(pending, rc)
		}
	}
	g.mu.Unlock()
	// Verify unpublished claims live, a few at a time.
	found := make([]*claim.Located, len(pending))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i, rc := range pending {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			loc, err := g.fleet.ByID(ctx, rc.loc.ID)
			switch {
			case err == nil:
				loc = g.withKnown(loc)
				found[i] = &loc
			case errors.Is(err, claim.ErrNotFound) || node.StatusOf(err) == http.StatusNotFound:
				g.forget(rc.loc)
			default:
				l := rc.loc // node unreachable: show what we know
				found[i] = &l
			}
		}()
	}
	wg.Wait()
	for _, l := range found {
		if l != nil {
			out = append(out, *l)
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
	byID := make(map[string]claim.Located, len(locs))
	for i, l := range locs {
		id := RenderID(l.ID)
		items[i] = listItem{ID: id, Template: l.Template, Paused: l.Hibernated, StartedAt: l.ClaimedAt, Metadata: l.Metadata}
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

// live asks the node whether s is hibernated (the view may be stale).
func (g *gateway) live(ctx context.Context, s claim.Located) (bool, error) {
	st, err := g.fleet.Stats(ctx, s)
	if err != nil {
		return false, err
	}
	return st.Hibernated, nil
}

// failSandbox maps err about the request's sandbox {id} to an e2b error answer.
func failSandbox(w http.ResponseWriter, r *http.Request, err error) {
	fail(w, err, "sandbox "+strconv.Quote(r.PathValue("id")))
}

// sandboxFor resolves the request's {id}; on failure it writes the error
// answer and returns false.
func (g *gateway) sandboxFor(w http.ResponseWriter, r *http.Request) (claim.Located, bool) {
	s, err := g.lookup(r.Context(), r.PathValue("id"))
	if err != nil {
		failSandbox(w, r, err)
		return claim.Located{}, false
	}
	return s, true
}

// pausedFor asks s's node whether it is paused; on failure it writes the
// error answer and returns ok false.
func (g *gateway) pausedFor(w http.ResponseWriter, r *http.Request, s claim.Located) (paused, ok bool) {
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
	if h, err := g.live(r.Context(), s); err == nil {
		s.Hibernated = h
	}
	d := detailJSON{
		listedJSON: g.listedOf(s), Domain: g.domain(),
		AllowInternetAccess: s.Net == sandbox.NetEgress, Lifecycle: lifecycle{OnTimeout: "kill"},
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
	s, ok := g.sandboxFor(w, r)
	if !ok {
		return
	}
	deadline, err := g.fleet.Renew(r.Context(), s, *req.Timeout)
	if err != nil {
		failSandbox(w, r, err)
		return
	}
	g.renewed(s, deadline)
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
	if req.Memory != nil && !*req.Memory {
		writeError(w, http.StatusBadRequest, "a pause without memory (file system only) is not supported")
		return
	}
	g.dropRoute(s.ID)
	if err := g.fleet.Hibernate(r.Context(), s); err != nil {
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
		if err := g.fleet.Wake(r.Context(), s); err != nil {
			failSandbox(w, r, err)
			return
		}
		g.dropRoute(s.ID)
		status = http.StatusCreated
	}
	// A connect timeout only extends the lease.
	if req.Timeout != nil && *req.Timeout > 0 && g.now().Add(time.Duration(*req.Timeout)*time.Second).After(s.Deadline) {
		deadline, err := g.fleet.Renew(r.Context(), s, *req.Timeout)
		if err != nil {
			failSandbox(w, r, err)
			return
		}
		g.renewed(s, deadline)
	}
	writeJSON(w, status, g.sandboxOf(s))
}

const maxForkCount = 100

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
	if count < 1 || count > maxForkCount {
		writeError(w, http.StatusBadRequest, "count must be in [1, %d], got %d", maxForkCount, count)
		return
	}
	ttl, ok := g.leaseSeconds(req.Timeout)
	if !ok {
		writeError(w, http.StatusBadRequest, "timeout must be >= 0")
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
	children, err := g.fleet.Fork(r.Context(), s, count, ttl)
	if err != nil {
		failSandbox(w, r, err)
		return
	}
	ns, _, _ := strings.Cut(s.ClaimRef, "/")
	out := make([]map[string]any, 0, len(children))
	for _, c := range children {
		loc := located(c, s.Template, ns+"/"+c.ID, s.Net, s.Metadata)
		g.remember(loc)
		out = append(out, map[string]any{"sandbox": g.sandboxOf(loc)})
	}
	writeJSON(w, http.StatusOK, out)
}

type snapshotJSON struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

func snapshotOf(c node.Checkpoint) snapshotJSON {
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
	c, err := g.fleet.Checkpoint(r.Context(), s, req.Name)
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
	cps, err := g.fleet.Checkpoints(r.Context())
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
	if err := g.fleet.DeleteCheckpoint(r.Context(), id); err != nil {
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

func (g *gateway) handleMetrics(w http.ResponseWriter, r *http.Request) {
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
	writeJSON(w, http.StatusOK, []metricJSON{{
		Timestamp: rfc3339(at), TimestampUnix: at.Unix(), CPUCount: st.CPUCount,
		MemUsed: st.MemUsedBytes, MemTotal: st.MemTotalBytes,
	}})
}

// PoolLister is an optional extension of claim.Fleet: the warm pools the
// fleet advertises. Without it, templates come from the claimed sandboxes.
type PoolLister interface {
	Pools(ctx context.Context) ([]node.PoolInfo, error)
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
	if pl, ok := g.fleet.(PoolLister); ok {
		pools, err := pl.Pools(r.Context())
		if err != nil {
			fail(w, err, "templates")
			return
		}
		for _, p := range pools {
			shapes = append(shapes, shape{p.Template, p.Size})
		}
	} else {
		all, err := g.fleet.List(r.Context())
		if err != nil {
			fail(w, err, "templates")
			return
		}
		for _, l := range all {
			shapes = append(shapes, shape{l.Template, l.Size})
		}
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
