package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/hearthvm/hearth/claim"
	"github.com/hearthvm/hearth/e2b/envd"
	"github.com/hearthvm/hearth/node"
	"github.com/hearthvm/hearth/pool"
	"github.com/hearthvm/hearth/vmm"
)

// fakeFleet is a claim.Fleet for gateway tests: one fake node whose
// sandboxes are REAL agents (envd handlers on loopback), so the data plane
// is exercised end to end. List shows only "published" sandboxes, like the
// NodeInventory view.
type fakeFleet struct {
	t testing.TB

	mu        sync.Mutex
	warm      map[pool.Key]int
	sandboxes map[string]*fakeSandbox
	cps       []node.Checkpoint
	seq       int
	claims    []claim.Request
	renews    []int64
	publishAt bool // when true, claims are published at once
}

type fakeSandbox struct {
	loc     claim.Located
	srv     *httptest.Server
	publish bool
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

// publishAll marks every sandbox published (as an inventory publish would).
func (f *fakeFleet) publishAll() {
	f.mu.Lock()
	for _, s := range f.sandboxes {
		s.publish = true
	}
	f.mu.Unlock()
}

func (f *fakeFleet) newSandbox(key pool.Key, ttl int64, ref string, env, md map[string]string) (*fakeSandbox, error) {
	f.seq++
	id := fmt.Sprintf("sb_%04d", f.seq)
	token := fmt.Sprintf("tok-%d", f.seq)
	srv := httptest.NewServer(envd.NewHandler(envd.Options{Token: token, Root: f.t.TempDir()}))
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
	s := &fakeSandbox{srv: srv, publish: f.publishAt, loc: claim.Located{
		Sandbox: node.Sandbox{ID: id, Template: key.Template, Net: key.Net, Size: key.Size, ClaimRef: ref,
			Addr: srv.Listener.Addr().String(), Deadline: now.Add(time.Duration(ttl) * time.Second),
			ClaimedAt: now.Add(time.Duration(f.seq) * time.Millisecond), Metadata: md, Token: token, Node: "node-a"},
		Node: "node-a", NodeAddr: "127.0.0.1:1",
	}}
	f.sandboxes[id] = s
	return s, nil
}

func delivery(s *fakeSandbox) claim.Delivery {
	return claim.Delivery{ClaimResult: node.ClaimResult{ID: s.loc.ID, Token: s.loc.Token, Deadline: s.loc.Deadline,
		OwnerAddr: s.loc.Addr, ClaimedAt: s.loc.ClaimedAt, Node: "node-a", ClaimRef: s.loc.ClaimRef, Template: s.loc.Template},
		Node: "node-a", NodeAddr: "127.0.0.1:1"}
}

func (f *fakeFleet) Claim(ctx context.Context, req claim.Request) (claim.Delivery, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.claims = append(f.claims, req)
	if f.warm[req.Key] == 0 {
		return claim.Delivery{}, &claim.ErrNoWarmCapacity{Key: req.Key}
	}
	f.warm[req.Key]--
	s, err := f.newSandbox(req.Key, req.TTLSeconds, req.Ref, req.Env, req.Metadata)
	if err != nil {
		return claim.Delivery{}, err
	}
	return delivery(s), nil
}

func (f *fakeFleet) get(id string) (*fakeSandbox, error) {
	s, ok := f.sandboxes[id]
	if !ok {
		return nil, claim.ErrNotFound
	}
	return s, nil
}

func (f *fakeFleet) ByRef(ctx context.Context, ref string) (claim.Located, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.sandboxes {
		if s.loc.ClaimRef == ref {
			return s.loc, nil
		}
	}
	return claim.Located{}, claim.ErrNotFound
}

func (f *fakeFleet) ByID(ctx context.Context, id string) (claim.Located, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.get(id)
	if err != nil {
		return claim.Located{}, err
	}
	return s.loc, nil
}

// List is the published view: no metadata and no token, like inventory entries.
func (f *fakeFleet) List(ctx context.Context) ([]claim.Located, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []claim.Located
	for _, s := range f.sandboxes {
		if s.publish {
			l := s.loc
			l.Metadata, l.Token = nil, ""
			out = append(out, l)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func (f *fakeFleet) Release(ctx context.Context, l claim.Located) error {
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

func (f *fakeFleet) setHibernated(id string, h bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.get(id)
	if err != nil {
		return err
	}
	s.loc.Hibernated = h
	return nil
}

func (f *fakeFleet) Hibernate(ctx context.Context, l claim.Located) error {
	return f.setHibernated(l.ID, true)
}
func (f *fakeFleet) Wake(ctx context.Context, l claim.Located) error {
	return f.setHibernated(l.ID, false)
}

func (f *fakeFleet) Fork(ctx context.Context, l claim.Located, count int, ttl int64) ([]claim.Delivery, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, err := f.get(l.ID)
	if err != nil {
		return nil, err
	}
	var out []claim.Delivery
	for i := 0; i < count; i++ {
		k := pool.Key{Template: p.loc.Template, Net: p.loc.Net, Size: p.loc.Size}
		c, err := f.newSandbox(k, ttl, "", nil, nil)
		if err != nil {
			return nil, err
		}
		c.loc.ClaimRef = "default/" + c.loc.ID
		out = append(out, delivery(c))
	}
	return out, nil
}

func (f *fakeFleet) Checkpoint(ctx context.Context, l claim.Located, name string) (node.Checkpoint, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.get(l.ID); err != nil {
		return node.Checkpoint{}, err
	}
	c := node.Checkpoint{ID: fmt.Sprintf("cp_%d", len(f.cps)+1), Name: name, SandboxID: l.ID, CreatedAt: time.Now()}
	f.cps = append(f.cps, c)
	return c, nil
}

func (f *fakeFleet) Checkpoints(ctx context.Context) ([]node.Checkpoint, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]node.Checkpoint(nil), f.cps...), nil
}

func (f *fakeFleet) DeleteCheckpoint(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, c := range f.cps {
		if c.ID == id {
			f.cps = append(f.cps[:i], f.cps[i+1:]...)
			return nil
		}
	}
	return claim.ErrNotFound
}

func (f *fakeFleet) Renew(ctx context.Context, l claim.Located, ttl int64) (time.Time, error) {
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

func (f *fakeFleet) Stats(ctx context.Context, l claim.Located) (node.Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.get(l.ID)
	if err != nil {
		return node.Stats{}, err
	}
	return node.Stats{ID: l.ID, Hibernated: s.loc.Hibernated, Stats: vmm.Stats{CPUCount: 1, MemTotalBytes: 2 << 30, MemUsedBytes: 1 << 20}}, nil
}

var _ claim.Fleet = (*fakeFleet)(nil)
