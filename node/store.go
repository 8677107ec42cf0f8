package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Buckets of the node's store.
var (
	bucketSandboxes = []byte("sandboxes") // claim id → record
	bucketSnapshots = []byte("snapshots") // snapshot id → snapRecord
	bucketMeta      = []byte("meta")      // "pools" → []poolTarget
	keyPools        = []byte("pools")
)

// poolTarget is a warm target as persisted (and as PUT /v1/pools asks).
type poolTarget struct {
	Template string `json:"template"`
	Net      string `json:"net"`
	Size     string `json:"size"`
	Warm     int32  `json:"warm"`
}

// store mirrors the claim table, the snapshots and the pool targets in a
// bbolt file. Every commit is fsynced before it returns (unless the store
// was opened with noSync, for development and benchmarks), so an
// acknowledged claim survives a power loss. Claim and release records go
// through a leader-follower group commit (see commit): a write that finds
// no commit in flight commits at once, and the writes that arrive while a
// commit is syncing share the next one (one transaction, one fsync).
type store struct {
	db     *bolt.DB
	noSync bool
	group  groupCommit
}

// storeBatchSize bounds the writes one group commit carries; the rest wait
// for the next.
const storeBatchSize = 256

// groupCommit queues the writes that arrive while a commit is in flight.
type groupCommit struct {
	mu      sync.Mutex
	pending []*groupWrite
	// leading is true while some writer is committing (the leader).
	leading bool
}

// groupWrite is one caller's write waiting in a group commit.
type groupWrite struct {
	fn   func(*bolt.Tx) error
	err  error
	done chan struct{} // closed once err is final
	// lead is closed, instead of done, when the writer is to commit the
	// next group itself (its own write first).
	lead chan struct{}
}

// errStoreLocked means another process holds the data dir's store.
var errStoreLocked = errors.New("the data dir's store is locked (is another sandboxd using this --data-dir?)")

// openStore opens (creating) the store at path. noSync skips the fsync of
// every commit: a killed process still loses nothing (the page cache
// survives it), but a power loss may lose acknowledged claims.
func openStore(path string, noSync bool) (*store, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second, NoSync: noSync, NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("%s: %w", path, errStoreLocked)
		}
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketSandboxes, bucketSnapshots, bucketMeta} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return &store{db: db, noSync: noSync}, nil
}

func (s *store) close() error { return s.db.Close() }

// commit runs a claim-table write and returns once it is committed (and,
// unless noSync, fsynced). Writes are group-committed, leader-follower: a
// write that finds no commit in flight leads, committing the writes queued
// so far (its own first) in one transaction at once, without waiting for
// company; writes arriving meanwhile queue, and when the leader's commit
// ends it hands the lead to the oldest of them, which commits the whole
// queue. A lone write thus pays one commit, and N concurrent ones about
// two. fn may run more than once (when another write of its group fails,
// the group is retried without it), so it must be idempotent.
func (s *store) commit(fn func(*bolt.Tx) error) error {
	w := &groupWrite{fn: fn, done: make(chan struct{}), lead: make(chan struct{})}
	g := &s.group
	g.mu.Lock()
	g.pending = append(g.pending, w)
	lead := !g.leading
	if lead {
		g.leading = true
	}
	g.mu.Unlock()
	if !lead {
		select {
		case <-w.done:
			return w.err
		case <-w.lead:
		}
	}
	s.lead()
	<-w.done
	return w.err
}

// lead commits the writes queued now (at most storeBatchSize) as one group,
// answers each, then hands the lead to the oldest write still queued, or
// gives it up when none is. Called by the leader only.
func (s *store) lead() {
	g := &s.group
	g.mu.Lock()
	n := min(len(g.pending), storeBatchSize)
	batch := g.pending[:n:n]
	g.pending = append([]*groupWrite(nil), g.pending[n:]...)
	g.mu.Unlock()

	s.commitGroup(batch)

	g.mu.Lock()
	if len(g.pending) == 0 {
		g.leading = false
	} else {
		close(g.pending[0].lead)
	}
	g.mu.Unlock()
}

// commitGroup commits batch in one transaction and answers every write in
// it. A write whose fn fails gets its error and the transaction is retried
// without it, so one bad write never fails the others; a commit that fails
// (the fsync, a full disk) fails them all.
func (s *store) commitGroup(batch []*groupWrite) {
	for len(batch) > 0 {
		failed := -1
		err := s.db.Update(func(tx *bolt.Tx) error {
			for i, w := range batch {
				if err := w.fn(tx); err != nil {
					failed = i
					return err
				}
			}
			return nil
		})
		if failed >= 0 {
			batch[failed].err = err
			close(batch[failed].done)
			batch = append(batch[:failed:failed], batch[failed+1:]...)
			continue
		}
		for _, w := range batch {
			w.err = err
			close(w.done)
		}
		return
	}
}

// putSandboxes writes records in one transaction, committed (and synced)
// before it returns; concurrent callers share the commit. bbolt may run a
// batched function more than once, so it only puts.
func (s *store) putSandboxes(recs ...record) error {
	vals := make([][]byte, len(recs))
	for i, r := range recs {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		vals[i] = b
	}
	return s.commit(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSandboxes)
		for i, r := range recs {
			if err := b.Put([]byte(r.ID), vals[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// deleteSandbox forgets a sandbox, committed before it returns (batched
// like putSandboxes).
func (s *store) deleteSandbox(id string) error {
	return s.commit(func(tx *bolt.Tx) error { return tx.Bucket(bucketSandboxes).Delete([]byte(id)) })
}

func (s *store) sandboxes() ([]record, error) {
	var out []record
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSandboxes).ForEach(func(k, v []byte) error {
			var r record
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("sandbox record %q: %w", k, err)
			}
			out = append(out, r)
			return nil
		})
	})
	return out, err
}

func (s *store) putSnapshot(c snapRecord) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSnapshots).Put([]byte(c.Snapshot.ID), b)
	})
}

func (s *store) deleteSnapshot(id string) error {
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketSnapshots).Delete([]byte(id)) })
}

func (s *store) snapshots() ([]snapRecord, error) {
	var out []snapRecord
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSnapshots).ForEach(func(k, v []byte) error {
			var c snapRecord
			if err := json.Unmarshal(v, &c); err != nil {
				return fmt.Errorf("snapshot record %q: %w", k, err)
			}
			out = append(out, c)
			return nil
		})
	})
	return out, err
}

func (s *store) putPools(ts []poolTarget) error {
	b, err := json.Marshal(ts)
	if err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyPools, b) })
}

func (s *store) pools() ([]poolTarget, error) {
	var out []poolTarget
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketMeta).Get(keyPools)
		if v == nil {
			return nil
		}
		return json.Unmarshal(v, &out)
	})
	return out, err
}
