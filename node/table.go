package node

import (
	"crypto/sha256"
	"reflect"
	"sort"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/hearthvm/hearth/egress"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
	"github.com/hearthvm/hearth/vmm"
)

// record is one claimed sandbox as the node persists it.
type record struct {
	ID        string            `json:"id"`
	Key       pool.Key          `json:"key"`
	Handle    vmm.Handle        `json:"handle"`
	ClaimRef  string            `json:"claim_ref,omitempty"`
	Deadline  time.Time         `json:"deadline"`
	ClaimedAt time.Time         `json:"claimed_at"`
	Paused    bool              `json:"paused,omitempty"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	// Snapshot is the snapshot a snapshot claim was cloned from.
	Snapshot string `json:"snapshot,omitempty"`
	// Version counts the record's changes (nodeapi.Sandbox.Version).
	Version int64 `json:"version,omitempty"`
	// Object is what the claim recorded of its Kubernetes object.
	Object nodeapi.Object `json:"object,omitempty"`
	// Lifecycle is what the lease's end does (see autopause.go).
	Lifecycle nodeapi.Lifecycle `json:"lifecycle,omitempty"`
	// Stopped marks a pause without memory: the VM is stopped keeping
	// only its disk (the driver's vmm.Shutdowner, else vmm.Driver.Stop)
	// and a resume restores it, a new boot; never set unless Paused.
	Stopped bool `json:"stopped,omitempty"`
	// Tree is the id of the root of the fork tree a fork child belongs
	// to, Depth its generation below it (empty and 0 for a root; see Quota).
	Tree  string `json:"tree,omitempty"`
	Depth int    `json:"depth,omitempty"`
	// Env is the claim's env vars (applied to the agent through /init):
	// kept so that a VM restarted from its files (a resume after a pause
	// without memory, a restore of a dead agent) gets them again.
	Env map[string]string `json:"env,omitempty"`
	// Egress is the claim's egress policy, enforced through the driver
	// (vmm.EgressEnforcer) at claim time and again whenever the VM is
	// restored or re-adopted; forks and snapshot claims inherit it.
	Egress *egress.Policy `json:"egress,omitempty"`
	// PoolEgress is the policy of the pool its VM came from (installed as
	// the VM booted, kept by the driver): fork children and snapshot
	// claims are booted holding it too.
	PoolEgress *egress.Policy `json:"pool_egress,omitempty"`
	// Events are its last lifecycle events (events.go), persisted with the
	// change each records; rendered only for a lookup by id.
	Events []nodeapi.Event `json:"events,omitempty"`
}

// sandbox is a claimed VM in the table. mu serializes the lifecycle verbs
// on it (and is held while its record is first persisted); rec is written
// only while holding both mu and the table's lock, so readers may use either.
type sandbox struct {
	mu   sync.Mutex
	gone bool // removed from the table; set under mu
	rec  record
}

// poolState is one warm pool.
type poolState struct {
	key     pool.Key
	target  int32
	warm    []vmm.Handle // a stack: claims pop the newest
	booting int32
	// golden is the checkpoint directory warm VMs are cloned from; empty
	// until the first boot of the pool has made it.
	golden string
	// egress is the pool's policy (nodeapi.PoolSpec.Egress): each warm VM
	// is booted holding it; a change replaces the warm VMs.
	egress   *egress.Policy
	failures int
	retryAt  time.Time
	// bootErr is the last boot failure's error (nodeapi.PoolInfo.BootError),
	// evicted the warm VMs the health sweep took out of it.
	bootErr string
	evicted int64
}

// snapRecord is a snapshot as the node persists it.
type snapRecord struct {
	Snapshot nodeapi.Snapshot `json:"snapshot"`
	Dir      string           `json:"dir"`
	// Egress and PoolEgress are its source's policies: a sandbox claimed
	// from the snapshot is held to both.
	Egress     *egress.Policy `json:"egress,omitempty"`
	PoolEgress *egress.Policy `json:"pool_egress,omitempty"`
}

// snapshot is a snapshot in the table; mu is held for reading while it
// is cloned and for writing while it is deleted.
type snapshot struct {
	mu   sync.RWMutex
	gone bool
	rec  snapRecord
}

type tokenHash [sha256.Size]byte

func hashToken(t string) tokenHash { return sha256.Sum256([]byte(t)) }

// table is the node's in-memory state: warm pools, the claim table and its
// indexes, and the snapshots. It does no I/O and no locking; the Node
// guards it with one mutex. Every operation the claim path uses is O(1).
//
// It is the one place where records enter (insert), change (update) and
// leave (remove) the claim table and where warm pools change (take,
// addWarm, setTarget, evict, dropPool, drainWarm): each of them hands the
// change stream (hub, watch.go) the new state of the one sandbox or pool
// it touched, so no mutation goes unpublished and none rescans the table.
// Nothing else writes a record in the table or a pool's warm VMs or
// target.
type table struct {
	pools     map[pool.Key]*poolState
	byID      map[string]*sandbox
	byRef     map[string]map[string]*sandbox
	byToken   map[tokenHash]string
	snapshots map[string]*snapshot

	// hub receives every change (nil: none is published); node and addr
	// are the node's name and address, which its records carry.
	hub        *hub
	node, addr string
}

func newTable() *table {
	return &table{
		pools:     map[pool.Key]*poolState{},
		byID:      map[string]*sandbox{},
		byRef:     map[string]map[string]*sandbox{},
		byToken:   map[tokenHash]string{},
		snapshots: map[string]*snapshot{},
	}
}

// wireRecord renders a record as the one sandbox record of the node API,
// held by node (at addr); the token only withToken.
func wireRecord(r *record, node, addr string, withToken bool) nodeapi.Sandbox {
	s := nodeapi.Sandbox{
		ID: r.ID, Node: node, NodeAddr: addr,
		Template: r.Key.Template, Net: r.Key.Net, Size: r.Key.Size, ClaimRef: r.ClaimRef,
		AgentAddr: r.Handle.Addr, Deadline: r.Deadline, ClaimedAt: r.ClaimedAt, Paused: r.Paused,
		Metadata: r.Metadata, Version: r.Version, Object: r.Object, Lifecycle: r.Lifecycle, Egress: r.Egress,
	}
	if withToken {
		s.Token = r.Handle.Token
	}
	return s
}

// pool returns the pool for k, creating it when create is set.
func (t *table) pool(k pool.Key, create bool) *poolState {
	p := t.pools[k]
	if p == nil && create {
		p = &poolState{key: k}
		t.pools[k] = p
	}
	return p
}

// row is the pool as the change stream and the inventory list it (Warm
// and Target 0: not listed).
func (p *poolState) row() nodeapi.PoolInfo {
	return nodeapi.PoolInfo{Template: p.key.Template, Net: p.key.Net, Size: p.key.Size,
		Warm: int32(len(p.warm)), Target: p.target,
		BootFailures: int32(p.failures), BootError: p.bootErr, Evicted: p.evicted}
}

// take pops a warm VM of pool k.
func (t *table) take(k pool.Key) (vmm.Handle, bool) {
	p := t.pools[k]
	if p == nil || len(p.warm) == 0 {
		return vmm.Handle{}, false
	}
	h := p.warm[len(p.warm)-1]
	p.warm[len(p.warm)-1] = vmm.Handle{}
	p.warm = p.warm[:len(p.warm)-1]
	t.hub.setPool(p.row())
	return h, true
}

// bootDone records a finished boot of pool p: a failure (err, counted in
// a row) or a success (which clears them); the VM itself joins the pool
// through addWarm. now is the clock for the retry's backoff.
func (t *table) bootDone(p *poolState, err error, now time.Time) {
	if err != nil {
		p.failures++
		p.retryAt = now.Add(backoff(p.failures))
		p.bootErr = bootError(err)
	} else {
		p.failures, p.retryAt, p.bootErr = 0, time.Time{}, ""
	}
	t.hub.setPool(p.row())
}

// bootError is err's text cut to nodeapi.MaxBootErrorBytes (on a rune
// boundary).
func bootError(err error) string {
	s := err.Error()
	if len(s) <= nodeapi.MaxBootErrorBytes {
		return s
	}
	s = s[:nodeapi.MaxBootErrorBytes]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// addWarm adds a warm VM to pool p.
func (t *table) addWarm(p *poolState, h vmm.Handle) {
	p.warm = append(p.warm, h)
	t.hub.setPool(p.row())
}

// setTarget sets pool k's warm target, creating the pool.
func (t *table) setTarget(k pool.Key, warm int32) {
	p := t.pool(k, true)
	p.target = warm
	t.hub.setPool(p.row())
}

// warmVM is a warm VM taken out of its pool.
type warmVM struct {
	h   vmm.Handle
	key pool.Key
}

// evict takes the warm VMs whose ids are in ids out of their pools.
func (t *table) evict(ids map[string]bool) []warmVM {
	var out []warmVM
	for _, p := range t.sortedPools() {
		kept := p.warm[:0]
		for _, h := range p.warm {
			if ids[h.ID] {
				out = append(out, warmVM{h: h, key: p.key})
				p.evicted++
				continue
			}
			kept = append(kept, h)
		}
		if len(kept) == len(p.warm) {
			continue
		}
		for i := len(kept); i < len(p.warm); i++ {
			p.warm[i] = vmm.Handle{}
		}
		p.warm = kept
		t.hub.setPool(p.row())
	}
	return out
}

// dropPool forgets pool k (a drained pool: no target, no warm VM).
func (t *table) dropPool(k pool.Key) {
	delete(t.pools, k)
	t.hub.setPool(nodeapi.PoolInfo{Template: k.Template, Net: k.Net, Size: k.Size})
}

// drainWarm takes every warm VM out of every pool.
func (t *table) drainWarm() []vmm.Handle {
	var out []vmm.Handle
	for _, p := range t.sortedPools() {
		if len(p.warm) == 0 {
			continue
		}
		out = append(out, p.warm...)
		p.warm = nil
		t.hub.setPool(p.row())
	}
	return out
}

// insert adds sb to the claim table and its indexes.
func (t *table) insert(sb *sandbox) {
	t.byID[sb.rec.ID] = sb
	t.index(sb)
	t.hub.put(streamed(&sb.rec, t.node, t.addr))
}

// index adds sb under its claim ref and token.
func (t *table) index(sb *sandbox) {
	if ref := sb.rec.ClaimRef; ref != "" {
		m := t.byRef[ref]
		if m == nil {
			m = map[string]*sandbox{}
			t.byRef[ref] = m
		}
		m[sb.rec.ID] = sb
	}
	if sb.rec.Handle.Token != "" {
		t.byToken[hashToken(sb.rec.Handle.Token)] = sb.rec.ID
	}
}

// unindex removes sb (recorded as r) from the claim ref and token indexes.
func (t *table) unindex(r *record) {
	if ref := r.ClaimRef; ref != "" {
		if m := t.byRef[ref]; m != nil {
			delete(m, r.ID)
			if len(m) == 0 {
				delete(t.byRef, ref)
			}
		}
	}
	if tok := r.Handle.Token; tok != "" {
		h := hashToken(tok)
		if t.byToken[h] == r.ID {
			delete(t.byToken, h)
		}
	}
}

// update applies mut to sb's record, keeps the indexes in step and
// publishes the change; it returns the new record. A sandbox no longer
// in the table (released meanwhile) only has its record changed.
func (t *table) update(sb *sandbox, mut func(r *record)) record {
	old := sb.rec
	mut(&sb.rec)
	if t.byID[sb.rec.ID] != sb {
		return sb.rec
	}
	if old.ClaimRef != sb.rec.ClaimRef || old.Handle.Token != sb.rec.Handle.Token {
		t.unindex(&old)
		t.index(sb)
	}
	t.hub.put(streamed(&sb.rec, t.node, t.addr))
	return sb.rec
}

// remove deletes id from the claim table and returns it (nil if absent).
func (t *table) remove(id string) *sandbox {
	sb := t.byID[id]
	if sb == nil {
		return nil
	}
	delete(t.byID, id)
	t.unindex(&sb.rec)
	t.hub.del(id)
	return sb
}

// holder returns a sandbox recorded under ref, if any: a claim ref names
// at most one live sandbox (claims, forks and snapshot claims check it
// under the table's lock before inserting).
func (t *table) holder(ref string) *sandbox {
	for _, sb := range t.byRef[ref] {
		return sb
	}
	return nil
}

// ref returns the sandboxes recorded under ref, oldest claim first.
func (t *table) ref(ref string) []*sandbox {
	m := t.byRef[ref]
	out := make([]*sandbox, 0, len(m))
	for _, sb := range m {
		out = append(out, sb)
	}
	sortSandboxes(out)
	return out
}

// all returns every claimed sandbox, oldest claim first.
func (t *table) all() []*sandbox {
	out := make([]*sandbox, 0, len(t.byID))
	for _, sb := range t.byID {
		out = append(out, sb)
	}
	sortSandboxes(out)
	return out
}

func sortSandboxes(s []*sandbox) {
	sort.Slice(s, func(i, j int) bool {
		a, b := s[i].rec, s[j].rec
		if !a.ClaimedAt.Equal(b.ClaimedAt) {
			return a.ClaimedAt.Before(b.ClaimedAt)
		}
		return a.ID < b.ID
	})
}

// expired returns the ids whose deadline is at or before now.
func (t *table) expired(now time.Time) []string {
	var out []string
	for id, sb := range t.byID {
		if !sb.rec.Deadline.After(now) && !sb.rec.pausedAtTimeout() {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// vmIDs returns the VM ids of every claimed sandbox.
func (t *table) vmIDs() map[string]bool {
	out := make(map[string]bool, len(t.byID))
	for _, sb := range t.byID {
		out[sb.rec.Handle.ID] = true
	}
	return out
}

func keyLess(a, b pool.Key) bool {
	if a.Template != b.Template {
		return a.Template < b.Template
	}
	if a.Net != b.Net {
		return a.Net < b.Net
	}
	return a.Size < b.Size
}

// sortedPools returns the pools ordered by key.
func (t *table) sortedPools() []*poolState {
	out := make([]*poolState, 0, len(t.pools))
	for _, p := range t.pools {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return keyLess(out[i].key, out[j].key) })
	return out
}

// samePolicy reports whether two egress policies are the same (nil: none).
func samePolicy(a, b *egress.Policy) bool {
	if a == nil || b == nil {
		return a == b
	}
	return reflect.DeepEqual(a, b)
}
