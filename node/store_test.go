package node

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The claim store syncs every commit unless told not to, and concurrent
// claim records all land (group commit) before their callers return.
func TestStore_SyncedGroupCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.db")
	st, err := openStore(path, false)
	if err != nil {
		t.Fatal(err)
	}
	if st.db.NoSync {
		t.Fatal("the store does not sync its commits")
	}
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := st.putSandboxes(record{ID: fmt.Sprintf("sb_%02d", i)}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if err := st.deleteSandbox("sb_00"); err != nil {
		t.Fatal(err)
	}
	if err := st.close(); err != nil {
		t.Fatal(err)
	}
	st, err = openStore(path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	recs, err := st.sandboxes()
	if err != nil || len(recs) != 63 {
		t.Fatalf("after reopening: %d records, %v; want 63", len(recs), err)
	}
}

// A write that finds no commit in flight commits at once: it never waits
// for company (bbolt's DB.Batch held every lone claim for MaxBatchDelay,
// 2ms, before its fsync). Measured to the write's entry into its
// transaction, so the fsync's own cost does not count; the fastest of 20
// lone writes must be well under the old fixed delay.
func TestStore_LoneWriteCommitsAtOnce(t *testing.T) {
	st, err := openStore(filepath.Join(t.TempDir(), "node.db"), false)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	fastest := time.Hour
	for i := range 20 {
		t0 := time.Now()
		var entered time.Duration
		if err := st.commit(func(tx *bolt.Tx) error {
			entered = time.Since(t0)
			return tx.Bucket(bucketSandboxes).Put(fmt.Appendf(nil, "sb_%02d", i), []byte("{}"))
		}); err != nil {
			t.Fatal(err)
		}
		fastest = min(fastest, entered)
	}
	if fastest >= time.Millisecond {
		t.Fatalf("the fastest of 20 lone writes entered its transaction after %v: it waited for a batch", fastest)
	}
}

// Writes that arrive while a commit is in flight queue and then share one
// transaction (one fsync), committed as soon as the first one ends; each
// caller returns only after its write is committed.
func TestStore_WritesArrivingDuringACommitShareTheNext(t *testing.T) {
	st, err := openStore(filepath.Join(t.TempDir(), "node.db"), false)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	entered, release := make(chan int), make(chan struct{})
	leaderDone := make(chan error, 1)
	var leaderTx int
	go func() {
		leaderDone <- st.commit(func(tx *bolt.Tx) error {
			leaderTx = tx.ID()
			entered <- tx.ID()
			<-release
			return tx.Bucket(bucketSandboxes).Put([]byte("leader"), []byte("{}"))
		})
	}()
	<-entered
	const followers = 8
	var mu sync.Mutex
	txs := map[int]int{} // tx id → writes it ran (last run of each)
	var wg sync.WaitGroup
	errs := make([]error, followers)
	for i := range followers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = st.commit(func(tx *bolt.Tx) error {
				mu.Lock()
				txs[tx.ID()]++
				mu.Unlock()
				return tx.Bucket(bucketSandboxes).Put(fmt.Appendf(nil, "f%d", i), []byte("{}"))
			})
		}()
	}
	waitFor(t, func() bool {
		st.group.mu.Lock()
		defer st.group.mu.Unlock()
		return len(st.group.pending) == followers
	})
	mu.Lock()
	ran := len(txs)
	mu.Unlock()
	if ran != 0 {
		t.Fatalf("a follower's write ran while the leader's commit was in flight: %v", txs)
	}
	close(release)
	if err := <-leaderDone; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("follower %d: %v", i, err)
		}
	}
	if len(txs) != 1 || txs[leaderTx] != 0 {
		t.Fatalf("the %d followers ran in transactions %v (leader's %d); want one shared transaction", followers, txs, leaderTx)
	}
	n := 0
	_ = st.db.View(func(tx *bolt.Tx) error { n = tx.Bucket(bucketSandboxes).Stats().KeyN; return nil })
	if n != followers+1 {
		t.Fatalf("%d records committed, want %d", n, followers+1)
	}
	st.group.mu.Lock()
	leading := st.group.leading
	st.group.mu.Unlock()
	if leading {
		t.Fatal("the lead was not given up with nothing queued")
	}
}

// A write that fails fails alone: the others of its group are committed.
func TestStore_AFailingWriteFailsAlone(t *testing.T) {
	st, err := openStore(filepath.Join(t.TempDir(), "node.db"), false)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	bad := errors.New("bad write")
	batch := []*groupWrite{}
	for i := range 5 {
		i := i
		batch = append(batch, &groupWrite{done: make(chan struct{}), fn: func(tx *bolt.Tx) error {
			if i == 2 {
				return bad
			}
			return tx.Bucket(bucketSandboxes).Put(fmt.Appendf(nil, "k%d", i), []byte("{}"))
		}})
	}
	st.commitGroup(batch)
	for i, w := range batch {
		<-w.done
		if (i == 2) != errors.Is(w.err, bad) || (i != 2 && w.err != nil) {
			t.Fatalf("write %d: %v", i, w.err)
		}
	}
	n := 0
	_ = st.db.View(func(tx *bolt.Tx) error { n = tx.Bucket(bucketSandboxes).Stats().KeyN; return nil })
	if n != 4 {
		t.Fatalf("%d records committed, want 4", n)
	}
}
