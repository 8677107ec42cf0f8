package node

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/hearthvm/hearth/egress"
)

// Buckets of the node's store.
var (
	bucketSandboxes = []byte("sandboxes") // claim id → record, as of the last checkpoint
	bucketSnapshots = []byte("snapshots") // snapshot id → snapRecord
	bucketMeta      = []byte("meta")      // "pools" → []poolTarget, "journal-gen" → uint64
	keyPools        = []byte("pools")
)

// poolTarget is a warm target as persisted (and as PUT /v1/pools asks).
type poolTarget struct {
	Template string         `json:"template"`
	Net      string         `json:"net"`
	Size     string         `json:"size"`
	Warm     int32          `json:"warm"`
	Egress   *egress.Policy `json:"egress,omitempty"`
}

// store mirrors the claim table, the snapshots and the pool targets on
// disk, and every write is durable (synced) before it returns, unless the
// store was opened with noSync (development and benchmarks), so an
// acknowledged claim survives a power loss.
//
// Snapshots and pool targets (rare writes) are bbolt transactions of their
// own. Claim records (every claim, release, pause, resume, renew, label
// change) are appended to a claim journal (journal.go): one pwrite and one
// fdatasync, where a bbolt commit costs two. They go through a
// leader-follower group commit (see commit): a write that finds no append
// in flight appends at once, and the writes that arrive while an append
// is syncing share the next one.
//
// There are two journal files, each holding one generation of records.
// Appends go to the active one; once it holds storeCheckpointBytes, the
// leader starts the next generation in the other file and, in the
// background, applies the full one to bbolt's sandboxes bucket in one
// transaction that also records its generation (a checkpoint), so appends
// never wait for a checkpoint unless the next one is due first. A file
// is reset to a new generation only once the generation it held is in
// bbolt, synced. Opening the store replays, in order, the generations
// bbolt does not hold yet (none when bbolt holds no generation at all:
// the journals are then not this node.db's), and checkpoints them.
//
// A failed write was not committed: a group whose append fails (an
// fdatasync error) is failed, and before it is answered the acknowledged
// records are checkpointed from memory and a new generation started (see
// appendGroup), so its records are not replayed after a crash — unless
// that repair fails too (the disk keeps failing), when their outcome is
// unknown, as with any store.
type store struct {
	db       *bolt.DB
	noSync   bool
	group    groupCommit
	journals [2]*journal

	// pending is the records of the active generation, frozen those of
	// the one being checkpointed (nil when none): id → value (nil:
	// deleted). Guarded by pendMu.
	pendMu  sync.Mutex
	pending map[string][]byte
	frozen  map[string][]byte

	// The leader's state. active indexes journals; ckpt receives the
	// running checkpoint's result (nil when none runs); frozenGen is the
	// frozen generation. broken is the failure of the last append: what
	// the active journal holds past its end is then unknown, so nothing
	// is appended to that generation again: repair checkpoints it
	// (synchronously) and starts a new one, at once and, while that
	// fails, before each next group.
	active    int
	ckpt      chan error
	frozenGen uint64
	broken    error
	// beforeAppend, in tests, runs before each group's append with its
	// writes; an error fails the group as a failed append would.
	beforeAppend func(writes int) error
}

// storeBatchSize bounds the writes one group commit carries; the rest wait
// for the next.
const storeBatchSize = 256

// storeCheckpointBytes is the size of a journal generation (about 14,000
// claim records): past it the next generation starts and this one is
// checkpointed. Records land on random keys, so a checkpoint rewrites up
// to every leaf page of the sandboxes bucket once whatever its size: a
// generation larger than the table makes that cost small per record.
const storeCheckpointBytes = 8 << 20

// keyJournalGen, in the meta bucket, is the last journal generation
// checkpointed into bbolt (uint64, little-endian).
var keyJournalGen = []byte("journal-gen")

// groupCommit queues the writes that arrive while an append is in flight.
type groupCommit struct {
	mu      sync.Mutex
	pending []*groupWrite
	// leading is true while some writer is appending (the leader).
	leading bool
	// closed refuses new writes (store.close); idle, when not nil, is
	// closed when the lead is given up, for close to wait on.
	closed bool
	idle   chan struct{}
}

// errStoreClosed fails a write that comes after store.close.
var errStoreClosed = errors.New("the claim store is closed")

// groupWrite is one caller's write waiting in a group commit.
type groupWrite struct {
	ops  []journalOp
	err  error
	done chan struct{} // closed once err is final
	// lead is closed, instead of done, when the writer is to commit the
	// next group itself (its own write first).
	lead chan struct{}
}

// errStoreLocked means another process holds the data dir's store.
var errStoreLocked = errors.New("the data dir's store is locked (is another sandboxd using this --data-dir?)")

// openStore opens (creating) the store at path and its claim journals at
// path + ".journal0" and ".journal1", replaying them. noSync skips the
// fsync of every write: a killed process still loses nothing (the page
// cache survives it), but a power loss may lose acknowledged claims.
func openStore(path string, noSync bool) (*store, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second, NoSync: noSync, NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("%s: %w", path, errStoreLocked)
		}
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	var done uint64 // the last generation checkpointed
	// journaled: bbolt has a journal generation, so the journals are
	// this file's. Without one (a new node.db, or an operator removed
	// it) records left in journal files belong to no store here and are
	// not replayed: they would bring back claims of a table that is gone.
	journaled := false
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketSandboxes, bucketSnapshots, bucketMeta} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		if v := tx.Bucket(bucketMeta).Get(keyJournalGen); len(v) == 8 {
			done, journaled = binary.LittleEndian.Uint64(v), true
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	s := &store{db: db, noSync: noSync, pending: map[string][]byte{}}
	// The journals are opened under bbolt's file lock: one process at a
	// time. Their generations newer than bbolt's are replayed, oldest
	// first.
	type gen struct {
		gen uint64
		ops []journalOp
	}
	var gens []gen
	last := done
	for i := range s.journals {
		j, g, ops, err := openJournal(fmt.Sprintf("%s.journal%d", path, i), noSync)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("opening the claim journal: %w", err)
		}
		s.journals[i] = j
		if journaled && g > done {
			gens = append(gens, gen{g, ops})
		}
		last = max(last, g)
	}
	// The files' names must be as durable as their records: a new file's
	// fdatasync does not make its directory entry durable.
	if !noSync {
		if err := syncDir(filepath.Dir(path)); err != nil {
			s.close()
			return nil, err
		}
	}
	slices.SortFunc(gens, func(a, b gen) int { return cmp.Compare(a.gen, b.gen) })
	for _, g := range gens {
		s.remember(g.ops)
	}
	if err := s.checkpointActive(last); err != nil {
		s.close()
		return nil, fmt.Errorf("replaying the claim journal: %w", err)
	}
	return s, nil
}

// syncDir makes the entries of directory dir (files created in it)
// durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("syncing the directory %s: %w", dir, err)
	}
	return nil
}

// close refuses new writes, waits for the group commit in flight (the
// writes queued before it are answered) and a running checkpoint, and
// closes the files. It does not checkpoint: the next open replays the
// journals, as after a crash.
func (s *store) close() error {
	g := &s.group
	g.mu.Lock()
	g.closed = true
	var idle chan struct{}
	if g.leading {
		idle = make(chan struct{})
		g.idle = idle
	}
	g.mu.Unlock()
	if idle != nil {
		<-idle
	}
	if s.ckpt != nil {
		<-s.ckpt
		s.ckpt = nil
	}
	var errs []error
	for _, j := range s.journals {
		if j != nil {
			errs = append(errs, j.close())
		}
	}
	return errors.Join(append(errs, s.db.Close())...)
}

// remember records ops in pending, for the next checkpoint.
func (s *store) remember(ops []journalOp) {
	s.pendMu.Lock()
	defer s.pendMu.Unlock()
	for _, o := range ops {
		s.pending[string(o.key)] = o.val
	}
}

// applyToBolt writes the records of recs (in order: later maps win) to
// bbolt's sandboxes bucket and records gen as checkpointed, in one synced
// transaction.
func (s *store) applyToBolt(gen uint64, recs ...map[string][]byte) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSandboxes)
		for _, m := range recs {
			for _, k := range slices.Sorted(maps.Keys(m)) { // in key order: each leaf is visited once
				v := m[k]
				var err error
				if v == nil {
					err = b.Delete([]byte(k))
				} else {
					err = b.Put([]byte(k), v)
				}
				if err != nil {
					return err
				}
			}
		}
		return tx.Bucket(bucketMeta).Put(keyJournalGen, binary.LittleEndian.AppendUint64(nil, gen))
	})
}

// waitCheckpoint waits for the running checkpoint, if any; when it failed
// it is tried again, here. Called by the leader.
func (s *store) waitCheckpoint() error {
	if s.ckpt != nil {
		err := <-s.ckpt
		s.ckpt = nil
		if err == nil {
			return nil
		}
	}
	s.pendMu.Lock()
	frozen := s.frozen
	s.pendMu.Unlock()
	if frozen == nil {
		return nil
	}
	if err := s.applyToBolt(s.frozenGen, frozen); err != nil {
		return err
	}
	s.pendMu.Lock()
	s.frozen = nil
	s.pendMu.Unlock()
	return nil
}

// checkpointActive checkpoints everything pending, as generation gen,
// synchronously, and starts generation gen+1 in the active journal: at
// open, and after a failed append. Called by the leader, or before the
// store is shared.
func (s *store) checkpointActive(gen uint64) error {
	if err := s.waitCheckpoint(); err != nil {
		return err
	}
	s.pendMu.Lock()
	defer s.pendMu.Unlock()
	if err := s.applyToBolt(gen, s.pending); err != nil {
		return err
	}
	clear(s.pending)
	return s.journals[s.active].reset(gen + 1)
}

// rotate starts the next generation in the other journal file and
// checkpoints the active one in the background. It waits for the previous
// checkpoint first (the other file holds its generation until it is
// done). Called by the leader.
func (s *store) rotate() error {
	if err := s.waitCheckpoint(); err != nil {
		return err
	}
	cur, next := s.journals[s.active], s.journals[1-s.active]
	if err := next.reset(cur.gen + 1); err != nil {
		return err
	}
	s.active = 1 - s.active
	s.pendMu.Lock()
	frozen := s.pending
	s.frozen, s.pending, s.frozenGen = frozen, map[string][]byte{}, cur.gen
	s.pendMu.Unlock()
	ch := make(chan error, 1)
	s.ckpt = ch
	go func() {
		err := s.applyToBolt(cur.gen, frozen)
		if err == nil {
			s.pendMu.Lock()
			s.frozen = nil
			s.pendMu.Unlock()
		}
		ch <- err
	}()
	return nil
}

// commit appends a claim-table write to the journal and returns once it
// is synced (unless noSync). Writes are group-committed, leader-follower:
// a write that finds no append in flight leads, appending the writes
// queued so far (its own first) at once, in one pwrite and one fdatasync,
// without waiting for company; writes arriving meanwhile queue, and when
// the leader's append ends it hands the lead to the oldest of them, which
// appends the whole queue. A lone write thus pays one fdatasync, and N
// concurrent ones about two.
func (s *store) commit(ops ...journalOp) error {
	if err := checkOps(ops); err != nil {
		return err
	}
	w := &groupWrite{ops: ops, done: make(chan struct{}), lead: make(chan struct{})}
	g := &s.group
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return errStoreClosed
	}
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

// lead appends the writes queued now (at most storeBatchSize) as one
// group, answers each, starts the next journal generation when this one
// is full, then hands the lead to the oldest write still queued, or gives
// it up when none is. Called by the leader only.
func (s *store) lead() {
	g := &s.group
	g.mu.Lock()
	n := min(len(g.pending), storeBatchSize)
	batch := g.pending[:n:n]
	g.pending = append([]*groupWrite(nil), g.pending[n:]...)
	g.mu.Unlock()

	err := s.appendGroup(batch)
	for _, w := range batch {
		w.err = err
		close(w.done)
	}
	// A rotation that fails (its reset, or the previous checkpoint)
	// leaves the records in the active journal, where they are durable:
	// the journal grows and the next group tries again.
	if err == nil && s.journals[s.active].size() >= storeCheckpointBytes {
		_ = s.rotate()
	}

	g.mu.Lock()
	if len(g.pending) == 0 {
		g.leading = false
		if g.idle != nil {
			close(g.idle)
			g.idle = nil
		}
	} else {
		close(g.pending[0].lead)
	}
	g.mu.Unlock()
}

// appendGroup appends the writes of batch to the active journal in one
// pwrite and one fdatasync; a failure fails them all.
//
// A failed append (fsyncgate: after a failed fdatasync the file's state
// is unknown, and a later fdatasync may succeed without having written
// it) is never appended after: repair checkpoints the acknowledged
// records, from memory, into bbolt and starts a new generation at once,
// before the failed group is answered, so its records (written to the
// file, maybe durable) are not replayed after a crash either. When the
// repair fails, each next group tries it again before appending.
func (s *store) appendGroup(batch []*groupWrite) error {
	if err := s.repair(); err != nil {
		return err
	}
	if s.beforeAppend != nil {
		if err := s.beforeAppend(len(batch)); err != nil {
			s.broken = err
			_ = s.repair()
			return err
		}
	}
	var ops []journalOp
	for _, w := range batch {
		ops = append(ops, w.ops...)
	}
	if err := s.journals[s.active].append(ops); err != nil {
		s.broken = err
		_ = s.repair()
		return err
	}
	s.remember(ops)
	return nil
}

// repair, after a failed append (s.broken), checkpoints the active
// generation's acknowledged records and starts the next one in its file.
// Called by the leader.
func (s *store) repair() error {
	if s.broken == nil {
		return nil
	}
	if err := s.checkpointActive(s.journals[s.active].gen); err != nil {
		return fmt.Errorf("recovering the claim journal after %v: %w", s.broken, err)
	}
	s.broken = nil
	return nil
}

// putSandboxes writes records, synced before it returns; concurrent
// callers share the append.
func (s *store) putSandboxes(recs ...record) error {
	ops := make([]journalOp, len(recs))
	for i, r := range recs {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		ops[i] = journalOp{key: []byte(r.ID), val: b}
	}
	return s.commit(ops...)
}

// deleteSandbox forgets a sandbox, synced before it returns (shared like
// putSandboxes).
func (s *store) deleteSandbox(id string) error {
	return s.commit(journalOp{key: []byte(id)})
}

// sandboxes returns every recorded sandbox, in id order. Call it with no
// write in flight (the node does, while it recovers).
func (s *store) sandboxes() ([]record, error) {
	vals := map[string][]byte{}
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSandboxes).ForEach(func(k, v []byte) error {
			vals[string(k)] = bytes.Clone(v)
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	s.pendMu.Lock()
	for _, m := range []map[string][]byte{s.frozen, s.pending} {
		for k, v := range m {
			if v == nil {
				delete(vals, k)
			} else {
				vals[k] = v
			}
		}
	}
	s.pendMu.Unlock()
	out := make([]record, 0, len(vals))
	for _, k := range slices.Sorted(maps.Keys(vals)) {
		var r record
		if err := json.Unmarshal(vals[k], &r); err != nil {
			return nil, fmt.Errorf("sandbox record %q: %w", k, err)
		}
		out = append(out, r)
	}
	return out, nil
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
