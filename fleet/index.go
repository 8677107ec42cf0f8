package fleet

import (
	"sync"
	"time"

	"github.com/hearthvm/hearth/nodeapi"
)

// claimIndex is the bounded claim-time index: the records of the claims,
// forks and live lookups made through this fleet, by ref and by id. It is
// the one "visible before publish" mechanism of both API surfaces.
//
// Every put appends to a ring of at most max records; when the ring is full
// the oldest record is evicted unless its key was put again since (each
// key's latest put is its only live ring record), so the maps never hold
// more than max keys.
type claimIndex struct {
	mu    sync.Mutex
	max   int
	seq   uint64
	byRef map[string]indexed
	byID  map[string]indexed
	ring  []indexKey
	head  int // oldest ring record once the ring is full
}

type indexed struct {
	s   nodeapi.Sandbox
	seq uint64
}

type indexKey struct {
	key   string
	byRef bool
	seq   uint64
}

func newClaimIndex(max int) *claimIndex {
	return &claimIndex{max: max, byRef: map[string]indexed{}, byID: map[string]indexed{}}
}

func (x *claimIndex) put(s nodeapi.Sandbox) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if s.ClaimRef != "" {
		x.add(s.ClaimRef, true, s)
	}
	if s.ID != "" {
		x.add(s.ID, false, s)
	}
}

func (x *claimIndex) m(byRef bool) map[string]indexed {
	if byRef {
		return x.byRef
	}
	return x.byID
}

func (x *claimIndex) add(key string, byRef bool, s nodeapi.Sandbox) {
	x.seq++
	k := indexKey{key: key, byRef: byRef, seq: x.seq}
	if len(x.ring) < x.max {
		x.ring = append(x.ring, k)
	} else {
		old := x.ring[x.head]
		if m := x.m(old.byRef); m[old.key].seq == old.seq {
			delete(m, old.key)
		}
		x.ring[x.head] = k
		x.head = (x.head + 1) % x.max
	}
	x.m(byRef)[key] = indexed{s: s, seq: x.seq}
}

func (x *claimIndex) get(key string, byRef bool) (nodeapi.Sandbox, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	rec, ok := x.m(byRef)[key]
	return rec.s, ok
}

// unlisted returns the records indexed by id whose id is not in listed.
func (x *claimIndex) unlisted(listed map[string]bool) []nodeapi.Sandbox {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []nodeapi.Sandbox
	for id, rec := range x.byID {
		if !listed[id] {
			out = append(out, rec.s)
		}
	}
	return out
}

// renewed records a lease's new deadline.
func (x *claimIndex) renewed(id string, deadline time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if rec, ok := x.byID[id]; ok {
		rec.s.Deadline = deadline
		x.byID[id] = rec
	}
}

// len is the number of indexed keys.
func (x *claimIndex) len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.byRef) + len(x.byID)
}

// forget drops the records of a released claim (their ring records age out).
func (x *claimIndex) forget(ref, id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if rec, ok := x.byRef[ref]; ok && rec.s.ID == id {
		delete(x.byRef, ref)
	}
	delete(x.byID, id)
}
