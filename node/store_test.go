package node

import (
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// The claim store syncs every write unless told not to, and concurrent
// claim records all land (group commit) before their callers return.
func TestStore_SyncedGroupCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.db")
	st, err := openStore(path, false)
	if err != nil {
		t.Fatal(err)
	}
	if st.db.NoSync || st.journals[0].noSync || st.journals[1].noSync {
		t.Fatal("the store does not sync its writes")
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
	if err != nil || len(recs) != 63 || recs[0].ID != "sb_01" {
		t.Fatalf("after reopening: %d records, %v; want 63 from sb_01", len(recs), err)
	}
}

// A write that finds no append in flight appends at once: it never waits
// for company (bbolt's DB.Batch held every lone claim for MaxBatchDelay
// before its fsync). Measured to the group's start, so the fsync's own cost
// does not count; the fastest of 20 lone writes must be well under 1 ms.
func TestStore_LoneWriteCommitsAtOnce(t *testing.T) {
	st, err := openStore(filepath.Join(t.TempDir(), "node.db"), false)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	var t0 time.Time
	var entered time.Duration
	st.beforeAppend = func(int) error { entered = time.Since(t0); return nil }
	fastest := time.Hour
	for i := range 20 {
		t0 = time.Now()
		if err := st.commit(journalOp{key: fmt.Appendf(nil, "sb_%02d", i), val: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
		fastest = min(fastest, entered)
	}
	if fastest >= time.Millisecond {
		t.Fatalf("the fastest of 20 lone writes started its append after %v: it waited for a batch", fastest)
	}
}

// Writes that arrive while an append is in flight queue and then share one
// append (one fdatasync), made as soon as the first one ends; each caller
// returns only after its write is durable.
func TestStore_WritesArrivingDuringACommitShareTheNext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.db")
	st, err := openStore(path, false)
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var groups []int
	st.beforeAppend = func(n int) error {
		mu.Lock()
		groups = append(groups, n)
		first := len(groups) == 1
		mu.Unlock()
		if first {
			close(entered)
			<-release
		}
		return nil
	}
	leaderDone := make(chan error, 1)
	go func() { leaderDone <- st.commit(journalOp{key: []byte("leader"), val: []byte("{}")}) }()
	<-entered
	const followers = 8
	var wg sync.WaitGroup
	errs := make([]error, followers)
	for i := range followers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = st.commit(journalOp{key: fmt.Appendf(nil, "f%d", i), val: []byte("{}")})
		}()
	}
	require.Eventually(t, func() bool {
		st.group.mu.Lock()
		defer st.group.mu.Unlock()
		return len(st.group.pending) == followers
	}, waitWithin, waitTick)
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
	if !slices.Equal(groups, []int{1, followers}) {
		t.Fatalf("groups appended %v, want [1 %d]: the followers share one append", groups, followers)
	}
	st.group.mu.Lock()
	leading := st.group.leading
	st.group.mu.Unlock()
	if leading {
		t.Fatal("the lead was not given up with nothing queued")
	}
	if err := st.close(); err != nil {
		t.Fatal(err)
	}
	st, err = openStore(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	if recs, err := st.sandboxes(); err != nil || len(recs) != followers+1 {
		t.Fatalf("%d records after reopening (%v), want %d", len(recs), err, followers+1)
	}
}

// A failed append fails its whole group and nothing else: the next group
// is durable, and the failed writes are never replayed.
func TestStore_AFailedAppendFailsItsGroupOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.db")
	st, err := openStore(path, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.putSandboxes(record{ID: "sb_before"}); err != nil {
		t.Fatal(err)
	}
	bad := errors.New("injected: the disk failed")
	st.beforeAppend = func(int) error { return bad }
	if err := st.putSandboxes(record{ID: "sb_failed"}); !errors.Is(err, bad) {
		t.Fatalf("the failed group answered %v", err)
	}
	st.beforeAppend = nil
	if err := st.putSandboxes(record{ID: "sb_after"}); err != nil {
		t.Fatalf("the next group: %v", err)
	}
	if err := st.close(); err != nil {
		t.Fatal(err)
	}
	st, err = openStore(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	recs, _ := st.sandboxes()
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.ID)
	}
	if !slices.Equal(ids, []string{"sb_after", "sb_before"}) {
		t.Fatalf("records after reopening: %v", ids)
	}
}

// Records a crash leaves only in the journal (no checkpoint since) are
// there after the next open, in order: puts, overwrites, deletes.
func TestStore_ReplaysTheJournalAfterACrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.db")
	st, err := openStore(path, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []record{{ID: "sb_a"}, {ID: "sb_b"}, {ID: "sb_c"}, {ID: "sb_b", Paused: true}} {
		if err := st.putSandboxes(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.deleteSandbox("sb_a"); err != nil {
		t.Fatal(err)
	}
	inBolt := 0
	_ = st.db.View(func(tx *bolt.Tx) error { inBolt = tx.Bucket(bucketSandboxes).Stats().KeyN; return nil })
	if inBolt != 0 {
		t.Fatalf("bbolt holds %d records before any checkpoint", inBolt)
	}
	_ = st.close() // as a kill -9 leaves it: no checkpoint
	st, err = openStore(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	recs, err := st.sandboxes()
	if err != nil || len(recs) != 2 || recs[0].ID != "sb_b" || !recs[0].Paused || recs[1].ID != "sb_c" {
		t.Fatalf("after the crash: %+v, %v", recs, err)
	}
	if size := st.journals[st.active].size(); size != 0 {
		t.Fatalf("opening left %d bytes in the journal: it checkpoints what it replays", size)
	}
}

// Past storeCheckpointBytes the leader starts the next generation in the
// other journal file and checkpoints the full one in the background: the
// records move to bbolt with their generation; what the new generation
// holds (a delete of a checkpointed record) still wins after a crash, and
// the old generation, though still in its file, is not replayed over it.
func TestStore_CheckpointsAndStartsOver(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.db")
	st, err := openStore(path, true)
	if err != nil {
		t.Fatal(err)
	}
	meta := map[string]string{"pad": string(make([]byte, 32<<10))}
	first := st.active
	n := 0
	for ; st.active == first; n++ {
		if err := st.putSandboxes(record{ID: fmt.Sprintf("sb_%04d", n), Metadata: meta}); err != nil {
			t.Fatal(err)
		}
		journalSize(t, st)
	}
	if err := st.waitCheckpoint(); err != nil {
		t.Fatal(err)
	}
	inBolt := 0
	_ = st.db.View(func(tx *bolt.Tx) error { inBolt = tx.Bucket(bucketSandboxes).Stats().KeyN; return nil })
	if inBolt != n {
		t.Fatalf("bbolt holds %d records after the checkpoint, want %d", inBolt, n)
	}
	if err := st.deleteSandbox("sb_0000"); err != nil {
		t.Fatal(err)
	}
	if err := st.putSandboxes(record{ID: "sb_new"}); err != nil {
		t.Fatal(err)
	}
	_ = st.close()
	st, err = openStore(path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	recs, err := st.sandboxes()
	if err != nil || len(recs) != n || recs[0].ID != "sb_0001" || recs[n-1].ID != "sb_new" {
		t.Fatalf("after reopening: %d records (%v), want %d from sb_0001 to sb_new", len(recs), err, n)
	}
}

// A crash while a generation's checkpoint has not landed replays both
// generations, oldest first.
func TestStore_ReplaysBothGenerationsWhenTheCheckpointDidNotLand(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.db")
	st, err := openStore(path, true)
	if err != nil {
		t.Fatal(err)
	}
	// Generation 1 (the first after open) holds a put of sb_a; generation
	// 2 its delete; bbolt never got generation 1.
	if err := st.putSandboxes(record{ID: "sb_a"}, record{ID: "sb_b"}); err != nil {
		t.Fatal(err)
	}
	st.pendMu.Lock()
	st.frozen, st.pending = st.pending, map[string][]byte{}
	st.pendMu.Unlock()
	gen := st.journals[st.active].gen
	st.active = 1 - st.active
	if err := st.journals[st.active].reset(gen + 1); err != nil {
		t.Fatal(err)
	}
	if err := st.deleteSandbox("sb_a"); err != nil {
		t.Fatal(err)
	}
	_ = st.close()
	st, err = openStore(path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	recs, err := st.sandboxes()
	if err != nil || len(recs) != 1 || recs[0].ID != "sb_b" {
		t.Fatalf("after reopening: %+v, %v; want only sb_b", recs, err)
	}
}

// journalSize is the journal's size once the leader is done (a write
// returns before its leader's checkpoint).
func journalSize(t *testing.T, st *store) int64 {
	t.Helper()
	require.Eventually(t, func() bool {
		st.group.mu.Lock()
		defer st.group.mu.Unlock()
		return !st.group.leading
	}, waitWithin, waitTick)
	return st.journals[st.active].size()
}

// A generation bbolt already holds is never replayed, even when a later
// one changed the same record: after a restart the other journal file may
// still hold a generation two behind the active one.
func TestStore_NeverReplaysAGenerationBboltHolds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.db")
	st, err := openStore(path, true)
	if err != nil {
		t.Fatal(err)
	}
	step := func(f func() error) {
		t.Helper()
		if err := f(); err != nil {
			t.Fatal(err)
		}
		journalSize(t, st)
	}
	step(st.rotate)                                                   // generation 2, in journal1
	step(func() error { return st.putSandboxes(record{ID: "sb_x"}) }) // put in 2
	step(st.rotate)                                                   // generation 3, in journal0; 2 checkpointed
	step(func() error { return st.deleteSandbox("sb_x") })            // delete in 3
	step(func() error { return st.putSandboxes(record{ID: "sb_y"}) }) // put in 3
	_ = st.close()
	for range 2 { // the first open checkpoints 3 and starts 4 in journal0; journal1 keeps 2
		if st, err = openStore(path, true); err != nil {
			t.Fatal(err)
		}
		recs, err := st.sandboxes()
		if err != nil || len(recs) != 1 || recs[0].ID != "sb_y" {
			t.Fatalf("after reopening: %+v, %v; want only sb_y", recs, err)
		}
		_ = st.close()
	}
}

// journalBytes is a journal file of generation gen under salt holding ops.
func journalBytes(salt byte, gen uint64, ops []journalOp) []byte {
	s := [8]byte{salt}
	b, _ := encodeJournal(journalHeader(s, gen), crc32.Checksum(s[:], crc32c), ops)
	return b
}

// TestJournal_ReplayStopsWhereTheLastWriteEnded is the journal's pure
// core: replay returns the operations of the file's generation, in order,
// up to the first record that is torn, corrupt or of an older generation.
func TestJournal_ReplayStopsWhereTheLastWriteEnded(t *testing.T) {
	op := func(k, v string) journalOp {
		o := journalOp{key: []byte(k)}
		if v != "" {
			o.val = []byte(v)
		}
		return o
	}
	three := []journalOp{op("sb_a", `{"id":"sb_a"}`), op("sb_b", `{"id":"sb_b"}`), op("sb_a", "")}
	full := journalBytes(1, 7, three)
	second := len(journalBytes(1, 7, three[:2]))
	old := journalBytes(1, 5, append(slices.Clone(three), op("sb_z", `{"id":"sb_z"}`)))
	// A reset: a new salt's header and one record over the old file.
	reset := slices.Clone(old)
	copy(reset, journalBytes(2, 7, three[:1]))
	flipped := slices.Clone(full)
	flipped[len(flipped)-1] ^= 1
	for _, tc := range []struct {
		name string
		data []byte
		want int // the first want ops of three (of generation 7)
	}{
		{"a new file", nil, 0},
		{"zeros (preallocated)", make([]byte, 4096), 0},
		{"three records", full, 3},
		{"three records, then zeros", append(slices.Clone(full), make([]byte, 100)...), 3},
		{"the last record torn", full[:len(full)-2], 2},
		{"the last record's length only", full[:second+3], 2},
		{"the last record corrupt", flipped, 2},
		{"after a reset, the old generation's records are not replayed", reset, 1},
		{"a header torn by a reset", append(make([]byte, 10), full[10:]...), 0},
	} {
		gen, got := replayJournal(tc.data)
		if len(got) != tc.want {
			t.Fatalf("%s: %d operations, want %d", tc.name, len(got), tc.want)
		}
		if wantGen := uint64(7); (tc.want > 0 || tc.name == "after a reset, the old generation's records are not replayed") && gen != wantGen {
			t.Fatalf("%s: generation %d, want %d", tc.name, gen, wantGen)
		}
		for i, o := range got {
			if string(o.key) != string(three[i].key) || string(o.val) != string(three[i].val) || (o.val == nil) != (three[i].val == nil) {
				t.Fatalf("%s: operation %d is %q=%q, want %q=%q", tc.name, i, o.key, o.val, three[i].key, three[i].val)
			}
		}
	}
}

// The journal file is extended with zeros a chunk ahead of its records
// (appends overwrite written blocks, so a sync need not record a new
// size), and a new generation reuses it.
func TestJournal_IsExtendedAheadOfItsRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.db")
	st, err := openStore(path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	size := func() int64 {
		t.Helper()
		fi, err := os.Stat(path + ".journal0")
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	if got := size(); got != journalChunk {
		t.Fatalf("a new journal is %d bytes, want %d", got, journalChunk)
	}
	for i := range 100 {
		if err := st.putSandboxes(record{ID: fmt.Sprintf("sb_%03d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := size(); got != journalChunk {
		t.Fatalf("after 100 small records the journal is %d bytes, want %d", got, journalChunk)
	}
	big := map[string]string{"pad": strings.Repeat("x", journalChunk)}
	if err := st.putSandboxes(record{ID: "sb_big", Metadata: big}); err != nil {
		t.Fatal(err)
	}
	if got := size(); got != 2*journalChunk {
		t.Fatalf("past the first chunk the journal is %d bytes, want %d", got, 2*journalChunk)
	}
	if journalSize(t, st) >= 2*journalChunk {
		t.Fatal("the records reach the end of the file")
	}
}
