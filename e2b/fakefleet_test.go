package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hearthvm/hearth/agent"
	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
	"github.com/hearthvm/hearth/sandbox"
)

// fakeFleet is the gateway's Fleet for tests: one fake node whose
// sandboxes are REAL agents (envd handlers on loopback), so the data plane
// is exercised end to end. Like fleet.NodeFleet, List shows every claim at
// once (published or in the claim-time index), without tokens.
type fakeFleet struct {
	t testing.TB

	mu        sync.Mutex
	warm      map[pool.Key]int
	sandboxes map[string]*fakeSandbox
	snaps     []nodeapi.Snapshot
	seq       int
	claims    []nodeapi.ClaimRequest
	renews    []int64
	lookups   int // LiveByID and List calls: what reaches the nodes
	snapLists int // Snapshots calls (a fan-out to every node)
	// claimedAt, when set, is the n-th sandbox's claim time.
	claimedAt func(n int) time.Time
	// onClaim, when set, runs (unlocked) before a claim delivers.
	onClaim func(ctx context.Context)
	// inFlight, when set, runs (unlocked) once a claim, a fork or a claim
	// from a snapshot made its sandboxes, while the node's answer is on its
	// way. If ctx has ended by then the answer is lost, as a real fleet's
	// call cancelled mid-answer: the node keeps the sandboxes and the
	// caller gets ErrOutcomeUnknown.
	inFlight func(ctx context.Context)
	// leaseDef and leaseMax are the nodes' lease bounds LeaseBounds
	// reports (0: none), leaseAsks how often it was asked.
	leaseDef, leaseMax int64
	leaseAsks          int
	// refuse, when set, is what the node answers a fork, a snapshot or a
	// claim from a snapshot instead (its quota refusals).
	refuse error
}

// fakeToken is the fake's n-th sandbox token (well-formed, like a node's).
func fakeToken(n int) string { return fmt.Sprintf("tok-%d-0123456789abcdef", n) }

func (f *fakeFleet) lookupCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lookups
}

type fakeSandbox struct {
	loc nodeapi.Sandbox
	srv *httptest.Server
	// root is the agent's root (its guest file system).
	root string
}

func newFakeFleet(t testing.TB) *fakeFleet {
	f := &fakeFleet{t: t, warm: map[pool.Key]int{}, sandboxes: map[string]*fakeSandbox{}}
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, s := range f.sandboxes {
			s.srv.Close()
		}
	})
	return f
}

func (f *fakeFleet) addWarm(template string, n int) {
	k, _ := pool.KeyForE2B(template, false)
	f.mu.Lock()
	f.warm[k] += n
	f.mu.Unlock()
}

func (f *fakeFleet) newSandbox(key pool.Key, ttl int64, ref string, env, md map[string]string) (*fakeSandbox, error) {
	f.seq++
	id := fmt.Sprintf("sb_%04d", f.seq)
	token := fakeToken(f.seq)
	root := f.t.TempDir()
	srv := httptest.NewServer(agent.NewHandler(agent.Options{Token: token, Root: root}))
	if len(env) > 0 {
		b, _ := json.Marshal(map[string]any{"envVars": env})
		req, _ := http.NewRequest("POST", srv.URL+"/init", bytes.NewReader(b))
		req.Header.Set("X-Access-Token", token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		resp.Body.Close()
	}
	if ttl == 0 {
		ttl = 300
	}
	now := time.Now().UTC().Truncate(time.Second)
	claimed := now.Add(time.Duration(f.seq) * time.Millisecond)
	if f.claimedAt != nil {
		claimed = f.claimedAt(f.seq)
	}
	s := &fakeSandbox{srv: srv, root: root, loc: nodeapi.Sandbox{
		ID: id, Template: key.Template, Net: key.Net, Size: key.Size, ClaimRef: ref,
		AgentAddr: srv.Listener.Addr().String(), Deadline: now.Add(time.Duration(ttl) * time.Second),
		ClaimedAt: claimed, Metadata: md, Token: token,
		Node: "node-a", NodeAddr: "127.0.0.1:1",
	}}
	f.sandboxes[id] = s
	return s, nil
}

// answered runs inFlight and reports whether the node's answer of a claim
// of ref reached the caller (nil) or was lost (ErrOutcomeUnknown).
func (f *fakeFleet) answered(ctx context.Context, ref string) error {
	f.mu.Lock()
	hook := f.inFlight
	f.mu.Unlock()
	if hook == nil {
		return nil
	}
	hook(ctx)
	if ctx.Err() != nil {
		return &fleet.ErrOutcomeUnknown{Ref: ref, Node: "node-a", Err: ctx.Err()}
	}
	return nil
}

func (f *fakeFleet) Claim(ctx context.Context, req nodeapi.ClaimRequest) (nodeapi.Sandbox, error) {
	if f.onClaim != nil {
		f.onClaim(ctx)
	}
	s, err := f.claim(req)
	if err == nil {
		err = f.answered(ctx, req.ClaimRef)
	}
	if err != nil {
		return nodeapi.Sandbox{}, err
	}
	return s, nil
}

func (f *fakeFleet) claim(req nodeapi.ClaimRequest) (nodeapi.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.claims = append(f.claims, req)
	if f.warm[req.Key()] == 0 {
		return nodeapi.Sandbox{}, &fleet.ErrNoWarmCapacity{Key: req.Key()}
	}
	f.warm[req.Key()]--
	s, err := f.newSandbox(req.Key(), req.TTLSeconds, req.ClaimRef, req.Env, req.Metadata)
	if err != nil {
		return nodeapi.Sandbox{}, err
	}
	s.loc.Lifecycle = req.Lifecycle
	s.loc.Object = req.Object
	s.loc.Egress = req.Egress // recorded as a node records it
	// As a node decides it: e2b's when the claim's object is labelled so.
	s.loc.E2B = req.Object.Labels[sandbox.LabelE2B] == "true"
	return s.loc, nil
}

func (f *fakeFleet) get(id string) (*fakeSandbox, error) {
	s, ok := f.sandboxes[id]
	if !ok {
		return nil, fleet.ErrNotFound
	}
	return s, nil
}

func (f *fakeFleet) LiveByID(ctx context.Context, id string) (nodeapi.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lookups++
	s, err := f.get(id)
	if err != nil {
		return nodeapi.Sandbox{}, err
	}
	return s.loc, nil
}

// KnownByID is LiveByID for an id the fake's view names (its sandboxes:
// one node call, counted in lookups); any other id costs no node call.
func (f *fakeFleet) KnownByID(ctx context.Context, id string) (nodeapi.Sandbox, error) {
	f.mu.Lock()
	_, known := f.sandboxes[id]
	f.mu.Unlock()
	if !known {
		return nodeapi.Sandbox{}, fleet.ErrNotFound
	}
	return f.LiveByID(ctx, id)
}

// ViewByID is the fake's view: its sandboxes as they are, without token
// (no node call, not counted in lookups).
func (f *fakeFleet) ViewByID(id string) (nodeapi.Sandbox, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sandboxes[id]
	if !ok {
		return nodeapi.Sandbox{}, false
	}
	l := s.loc
	l.Token = ""
	return l, true
}

// List is every sandbox, without tokens.
func (f *fakeFleet) List(ctx context.Context) ([]nodeapi.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lookups++
	var out []nodeapi.Sandbox
	for _, s := range f.sandboxes {
		l := s.loc
		l.Token = ""
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func (f *fakeFleet) Pools(ctx context.Context) ([]nodeapi.PoolInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []nodeapi.PoolInfo
	for k, n := range f.warm {
		out = append(out, nodeapi.PoolInfo{Template: k.Template, Net: k.Net, Size: k.Size, Warm: int32(n)})
	}
	return out, nil
}

func (f *fakeFleet) Release(ctx context.Context, l nodeapi.Sandbox) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.get(l.ID)
	if err != nil {
		return err
	}
	s.srv.Close()
	delete(f.sandboxes, l.ID)
	return nil
}

func (f *fakeFleet) setPaused(id string, p bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.get(id)
	if err != nil {
		return err
	}
	s.loc.Paused = p
	return nil
}

func (f *fakeFleet) Pause(ctx context.Context, l nodeapi.Sandbox) error {
	return f.setPaused(l.ID, true)
}
func (f *fakeFleet) PauseWithoutMemory(ctx context.Context, l nodeapi.Sandbox) error {
	return f.setPaused(l.ID, true)
}
func (f *fakeFleet) Resume(ctx context.Context, l nodeapi.Sandbox) error {
	return f.setPaused(l.ID, false)
}

func (f *fakeFleet) Fork(ctx context.Context, l nodeapi.Sandbox, count int, ttl int64) ([]nodeapi.Sandbox, error) {
	kids, err := f.fork(l, count, ttl)
	if err == nil {
		err = f.answered(ctx, "")
	}
	if err != nil {
		return nil, err
	}
	return kids, nil
}

func (f *fakeFleet) fork(l nodeapi.Sandbox, count int, ttl int64) ([]nodeapi.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuse != nil {
		return nil, f.refuse
	}
	p, err := f.get(l.ID)
	if err != nil {
		return nil, err
	}
	var out []nodeapi.Sandbox
	for i := 0; i < count; i++ {
		k := pool.Key{Template: p.loc.Template, Net: p.loc.Net, Size: p.loc.Size}
		c, err := f.newSandbox(k, ttl, "", nil, p.loc.Metadata)
		if err != nil {
			return nil, err
		}
		ns, _, _ := strings.Cut(p.loc.ClaimRef, "/")
		c.loc.ClaimRef = ns + "/" + c.loc.ID
		// As a node forks: the parent's object (labels) and privacy.
		c.loc.Object = nodeapi.Object{Labels: p.loc.Labels, Annotations: p.loc.Annotations}
		c.loc.Lifecycle = nodeapi.Lifecycle{PrivateTraffic: p.loc.PrivateTraffic, E2B: p.loc.E2B}
		out = append(out, c.loc)
	}
	return out, nil
}

func (f *fakeFleet) Snapshot(ctx context.Context, l nodeapi.Sandbox, name string) (nodeapi.Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuse != nil {
		return nodeapi.Snapshot{}, f.refuse
	}
	p, err := f.get(l.ID)
	if err != nil {
		return nodeapi.Snapshot{}, err
	}
	ns, _, _ := strings.Cut(p.loc.ClaimRef, "/")
	c := nodeapi.Snapshot{ID: fmt.Sprintf("sn_%d", len(f.snaps)+1), Name: name, SandboxID: l.ID, CreatedAt: time.Now(),
		Key: p.loc.Key(), Node: "node-a", Namespace: ns, E2B: p.loc.E2B}
	f.snaps = append(f.snaps, c)
	return c, nil
}

func (f *fakeFleet) Snapshots(ctx context.Context) ([]nodeapi.Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.snapLists++
	return append([]nodeapi.Snapshot(nil), f.snaps...), nil
}

func (f *fakeFleet) DeleteSnapshot(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, c := range f.snaps {
		if c.ID == id {
			f.snaps = append(f.snaps[:i], f.snaps[i+1:]...)
			return nil
		}
	}
	return fleet.ErrNotFound
}

func (f *fakeFleet) Renew(ctx context.Context, l nodeapi.Sandbox, ttl int64) (time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.get(l.ID)
	if err != nil {
		return time.Time{}, err
	}
	f.renews = append(f.renews, ttl)
	s.loc.Deadline = time.Now().UTC().Truncate(time.Second).Add(time.Duration(ttl) * time.Second)
	return s.loc.Deadline, nil
}

func (f *fakeFleet) Stats(ctx context.Context, l nodeapi.Sandbox) (nodeapi.Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.get(l.ID)
	if err != nil {
		return nodeapi.Stats{}, err
	}
	return nodeapi.Stats{ID: l.ID, Paused: s.loc.Paused, CPUCount: 1, MemTotalBytes: 2 << 30, MemUsedBytes: 1 << 20, DiskTotalBytes: 10 << 30, DiskUsedBytes: 3 << 20}, nil
}

func (f *fakeFleet) ClaimSnapshot(ctx context.Context, snap nodeapi.Snapshot, req nodeapi.ClaimRequest) (nodeapi.Sandbox, error) {
	s, err := f.claimSnapshot(snap, req)
	if err == nil {
		err = f.answered(ctx, req.ClaimRef)
	}
	if err != nil {
		return nodeapi.Sandbox{}, err
	}
	return s, nil
}

func (f *fakeFleet) claimSnapshot(snap nodeapi.Snapshot, req nodeapi.ClaimRequest) (nodeapi.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuse != nil {
		return nodeapi.Sandbox{}, f.refuse
	}
	for _, c := range f.snaps {
		if c.ID == snap.ID {
			f.claims = append(f.claims, req)
			s, err := f.newSandbox(c.Key, req.TTLSeconds, req.ClaimRef, req.Env, req.Metadata)
			if err != nil {
				return nodeapi.Sandbox{}, err
			}
			s.loc.Lifecycle = req.Lifecycle // and, as a node, no object
			s.loc.E2B = c.E2B               // and the snapshot's e2b visibility
			return s.loc, nil
		}
	}
	return nodeapi.Sandbox{}, fleet.ErrNotFound
}

// SetLabels replaces the labels and annotations, as a node does: the
// e2b visibility stays what the claim decided.
func (f *fakeFleet) SetLabels(ctx context.Context, l nodeapi.Sandbox, req nodeapi.LabelsRequest) (nodeapi.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lookups++
	s, err := f.get(l.ID)
	if err != nil {
		return nodeapi.Sandbox{}, err
	}
	s.loc.Labels, s.loc.Annotations = req.Labels, req.Annotations
	s.loc.Version++
	return s.loc, nil
}

func (f *fakeFleet) LeaseBounds(context.Context) (int64, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leaseAsks++
	return f.leaseDef, f.leaseMax, nil
}

var _ Fleet = (*fakeFleet)(nil)

// Logs asks the sandbox's agent, as its node does.
func (f *fakeFleet) Logs(ctx context.Context, l nodeapi.Sandbox, q agentapi.LogsQuery) (agentapi.Logs, error) {
	f.mu.Lock()
	s, err := f.get(l.ID)
	f.mu.Unlock()
	if err != nil {
		return agentapi.Logs{}, err
	}
	return (&agentapi.Client{Addr: s.loc.AgentAddr, Token: s.loc.Token}).Logs(ctx, q)
}
