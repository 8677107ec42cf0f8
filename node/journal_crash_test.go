package node

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/hearthvm/hearth/nodeapi"
)

// crashOps is a small journal generation: puts, an overwrite, deletes.
var crashOps = []journalOp{
	{key: []byte("sb_a"), val: []byte(`{"id":"sb_a"}`)},
	{key: []byte("sb_b"), val: []byte(`{"id":"sb_b"}`)},
	{key: []byte("sb_c"), val: []byte(`{"id":"sb_c","metadata":{"k":"v"}}`)},
	{key: []byte("sb_a")},
	{key: []byte("sb_old_1")},
	{key: []byte("sb_b"), val: []byte(`{"id":"sb_b","paused":true}`)},
	{key: []byte("sb_d"), val: []byte(`{"id":"sb_d"}`)},
	{key: []byte("sb_c")},
}

// applyOps applies ops, in order, to m (a store's contents: id → value).
func applyOps(m map[string]string, ops []journalOp) map[string]string {
	m = maps.Clone(m)
	if m == nil {
		m = map[string]string{}
	}
	for _, o := range ops {
		if o.val == nil {
			delete(m, string(o.key))
		} else {
			m[string(o.key)] = string(o.val)
		}
	}
	return m
}

// boltContents is what bbolt's sandboxes bucket holds: after openStore
// (which checkpoints what it replays) that is the store's whole claim
// table.
func boltContents(t *testing.T, st *store) map[string]string {
	t.Helper()
	if len(st.pending) != 0 || st.frozen != nil {
		t.Fatalf("the store holds %d records outside bbolt after opening", len(st.pending)+len(st.frozen))
	}
	got := map[string]string{}
	err := st.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSandboxes).ForEach(func(k, v []byte) error {
			got[string(k)] = string(v)
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// A power loss tears the journal's last write anywhere: at every byte
// offset of a generation, with the file cut there, or continued by what an
// older generation left in the file (a reset reuses it), or by the zeros
// the file was extended with, and with any one byte of it corrupt, opening
// the store recovers exactly the records that end before the damage — the
// acknowledged prefix — over what bbolt holds, never an older generation's
// record, and never fails or panics; the store then takes writes and keeps
// them.
func TestJournal_RecoversTheAcknowledgedPrefixAtEveryByteOffset(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "node.db")
	st, err := openStore(path, true)
	if err != nil {
		t.Fatal(err)
	}
	// Generation 1 (journal0): records checkpointed into bbolt, then
	// generation 2 starts in the same file, over them (as after a failed
	// append).
	var older []journalOp
	for i := range 12 {
		older = append(older, journalOp{key: fmt.Appendf(nil, "sb_old_%d", i), val: fmt.Appendf(nil, `{"id":"sb_old_%d","metadata":{"pad":"%0100d"}}`, i, i)})
	}
	for _, o := range older {
		if err := st.commit(o); err != nil {
			t.Fatal(err)
		}
	}
	j0 := st.journals[0]
	oldImage, err := os.ReadFile(path + ".journal0")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.checkpointActive(j0.gen); err != nil {
		t.Fatal(err)
	}
	base := applyOps(nil, older)
	// ends[k] is where the k-th record of generation 2 ends.
	ends := []int{int(j0.off)}
	for _, o := range crashOps {
		if err := st.commit(o); err != nil {
			t.Fatal(err)
		}
		ends = append(ends, int(j0.off))
	}
	if err := st.close(); err != nil {
		t.Fatal(err)
	}
	image, err := os.ReadFile(path + ".journal0")
	if err != nil {
		t.Fatal(err)
	}
	boltImage, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(image) != len(oldImage) || !bytes.Equal(image[ends[len(ends)-1]:], oldImage[ends[len(ends)-1]:]) {
		t.Fatal("generation 2 does not lie over generation 1 in the file")
	}
	// ops is how many records of generation 2 end at or before off.
	ops := func(off int) int {
		k := 0
		for k+1 < len(ends) && ends[k+1] <= off {
			k++
		}
		return k
	}
	check := func(name string, journal []byte, k int, thenWrite bool) {
		t.Helper()
		for _, f := range []struct {
			name string
			data []byte
		}{{"node.db", boltImage}, {"node.db.journal0", journal}} {
			if err := os.WriteFile(filepath.Join(dir, f.name), f.data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		_ = os.Remove(path + ".journal1")
		st, err := openStore(path, true)
		if err != nil {
			t.Fatalf("%s: opening: %v", name, err)
		}
		want := applyOps(base, crashOps[:k])
		if got := boltContents(t, st); !maps.Equal(got, want) {
			st.close()
			t.Fatalf("%s: recovered %v, want the first %d records: %v", name, slices.Sorted(maps.Keys(got)), k, slices.Sorted(maps.Keys(want)))
		}
		if !thenWrite {
			st.close()
			return
		}
		// The store goes on: a write after the recovery is kept.
		if err := st.commit(journalOp{key: []byte("sb_after"), val: []byte(`{}`)}); err != nil {
			t.Fatalf("%s: writing after the recovery: %v", name, err)
		}
		if err := st.close(); err != nil {
			t.Fatal(err)
		}
		if st, err = openStore(path, true); err != nil {
			t.Fatalf("%s: reopening: %v", name, err)
		}
		want["sb_after"] = `{}`
		got := boltContents(t, st)
		st.close()
		if !maps.Equal(got, want) {
			t.Fatalf("%s: after a write and a reopen: %v, want %v", name, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
		}
	}
	last := ends[len(ends)-1]
	for cut := 0; cut <= last; cut++ {
		check(fmt.Sprintf("cut at %d", cut), image[:cut], ops(cut), false)
		torn := slices.Concat(image[:cut], oldImage[cut:])
		check(fmt.Sprintf("torn at %d over generation 1", cut), torn, ops(cut), true)
		zeros := slices.Concat(image[:cut], make([]byte, len(image)-cut))
		check(fmt.Sprintf("torn at %d over zeros", cut), zeros, ops(cut), false)
	}
	for i := range last {
		bad := slices.Clone(image)
		bad[i] ^= 0x40
		k := ops(i)
		switch {
		case i < 28: // the header (its crc covers bytes 0..23): generation 2 is not recognized
			k = 0
		case i < journalHeaderSize: // padding
			k = len(crashOps)
		}
		check(fmt.Sprintf("byte %d corrupt", i), bad, k, i%7 == 0)
	}
}

// killChildEnv names the store directory of the child process of
// TestStore_KillNineLosesNoAcknowledgedWriteAndResurrectsNoDeletedRecord.
const killChildEnv = "HEARTH_STORE_KILL_CHILD_DIR"

// killValue is the record the child writes for id, version v (1 or 2),
// padded so that journal generations fill (and rotate) within a round.
func killValue(id string, v int) string {
	return fmt.Sprintf(`{"id":%q,"version":%d,"metadata":{"pad":"%012000d"}}`, id, v, v)
}

// TestStore_KillNineChild is the child process: it writes claim records
// from 8 goroutines, fsync on, until it is killed, and says on stdout what
// it is about to write (lower case) and what was acknowledged (upper
// case): p/P id (put, version 1), u/U id (overwrite, version 2), d/D id
// (delete).
func TestStore_KillNineChild(t *testing.T) {
	dir := os.Getenv(killChildEnv)
	if dir == "" {
		t.Skip("the child of TestStore_KillNineLosesNoAcknowledgedWriteAndResurrectsNoDeletedRecord")
	}
	st, err := openStore(filepath.Join(dir, "node.db"), false)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	say := func(what, id string) {
		mu.Lock()
		defer mu.Unlock()
		if _, err := fmt.Fprintf(os.Stdout, "%s %s\n", what, id); err != nil {
			os.Exit(3)
		}
	}
	do := func(intent, ack, id string, o journalOp) {
		say(intent, id)
		if err := st.commit(o); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		say(ack, id)
	}
	round := os.Getenv(killChildEnv + "_ROUND")
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				id := fmt.Sprintf("sb_r%s_w%d_%05d", round, w, i)
				do("p", "P", id, journalOp{key: []byte(id), val: []byte(killValue(id, 1))})
				if i%3 == 1 {
					do("u", "U", id, journalOp{key: []byte(id), val: []byte(killValue(id, 2))})
				}
				if i%2 == 0 {
					do("d", "D", id, journalOp{key: []byte(id)})
				}
			}
		})
	}
	wg.Wait()
}

// A process killed (SIGKILL) at any instant of a write load loses no
// acknowledged write and brings back no acknowledged delete, across
// journal generations (each round's load fills several, so kills land
// during appends, rotations and background checkpoints) and across
// restarts (each round's child reopens what the last one left).
func TestStore_KillNineLosesNoAcknowledgedWriteAndResurrectsNoDeletedRecord(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	dir := t.TempDir()
	// settled is the state verified after earlier rounds: the next rounds
	// do not touch those records, so it must stay as it is.
	settled := map[string]string{}
	for round, killAfter := range []int{40, 900, 1700} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestStore_KillNineChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), killChildEnv+"="+dir, fmt.Sprintf("%s_ROUND=%d", killChildEnv, round))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		// Per id: what the child said, in order.
		said := map[string][]string{}
		puts := 0
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			what, id, ok := strings.Cut(sc.Text(), " ")
			if !ok || !strings.HasPrefix(id, "sb_r") {
				continue // the test framework's own output
			}
			said[id] = append(said[id], what)
			if what == "P" {
				if puts++; puts == killAfter {
					if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
						t.Fatal(err)
					}
				}
			}
			// Lines read after the kill were written before it: they
			// are acknowledgements all the same.
		}
		err = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: the child ended by itself (%v) after %d puts: %s", round, err, puts, stderr.String())
		}

		st, err := openStore(filepath.Join(dir, "node.db"), true)
		if err != nil {
			t.Fatalf("round %d: reopening after the kill: %v", round, err)
		}
		got := boltContents(t, st)
		gens := [2]uint64{st.journals[0].gen, st.journals[1].gen}
		if err := st.close(); err != nil {
			t.Fatal(err)
		}
		for id, v := range settled {
			if got[id] != v {
				t.Fatalf("round %d: %s, settled in an earlier round, is now %.40q (was %.40q)", round, id, got[id], v)
			}
		}
		for id := range got {
			if _, ok := settled[id]; !ok && said[id] == nil {
				t.Fatalf("round %d: %s is in the store but was not written since it was deleted (or ever)", round, id)
			}
		}
		for id, ws := range said {
			// allowed: what the store may hold for id (absent: ""),
			// given what was acknowledged (upper case) and what was
			// only attempted.
			allowed := map[string]bool{"": true}
			for _, w := range ws {
				switch w {
				case "p":
					allowed[killValue(id, 1)] = true
				case "P":
					allowed = map[string]bool{killValue(id, 1): true}
				case "u":
					allowed[killValue(id, 2)] = true
				case "U":
					allowed = map[string]bool{killValue(id, 2): true}
				case "d":
					allowed[""] = true
				case "D":
					allowed = map[string]bool{"": true}
				}
			}
			if !allowed[got[id]] {
				t.Fatalf("round %d: after %v, %s holds %.60q, which is not what was acknowledged", round, ws, id, got[id])
			}
			if v, ok := got[id]; ok {
				settled[id] = v
			}
		}
		t.Logf("round %d: killed after %d acknowledged puts; %d records; journal generation now %d", round, puts, len(got), max(gens[0], gens[1]))
	}
}

// faultySync is a journal's syncFile that fails its next failures calls
// (with EIO, as a disk does) and counts its calls.
type faultySync struct {
	mu       sync.Mutex
	failures int
	calls    int
}

func (f *faultySync) sync(*os.File) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.failures > 0 {
		f.failures--
		return syscall.EIO
	}
	return nil
}

func (f *faultySync) failNext(n int) {
	f.mu.Lock()
	f.failures = n
	f.mu.Unlock()
}

// openFaulty opens a synced store whose journals' fdatasync is fs (a
// no-op until it fails).
func openFaulty(t *testing.T, path string, fs *faultySync) *store {
	t.Helper()
	st, err := openStore(path, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range st.journals {
		j.syncFile = fs.sync
	}
	return st
}

// reopened is what the store at path holds after a crash of st (closed
// without a checkpoint, as kill -9 leaves it).
func reopened(t *testing.T, st *store, path string) map[string]string {
	t.Helper()
	_ = st.close()
	st, err := openStore(path, true)
	if err != nil {
		t.Fatalf("reopening: %v", err)
	}
	defer st.close()
	return boltContents(t, st)
}

func putOp(id string) journalOp {
	return journalOp{key: []byte(id), val: []byte(`{"id":"` + id + `"}`)}
}

// A group whose fdatasync fails is failed, and, though its records were
// written to the file, it is never replayed: the store does not append
// after a failed fdatasync (its file's state is then unknown — fsyncgate)
// but checkpoints the acknowledged records from memory and starts a new
// generation before it answers. So "failed" means not committed, even
// across a crash right after the answer.
func TestStore_AFailedFdatasyncIsNeitherAcknowledgedNorReplayed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.db")
	fs := &faultySync{}
	st := openFaulty(t, path, fs)
	if err := st.commit(putOp("sb_acked")); err != nil {
		t.Fatal(err)
	}
	gen := st.journals[st.active].gen
	fs.failNext(1)
	if err := st.commit(putOp("sb_failed")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("a group whose fdatasync failed answered %v", err)
	}
	if got := st.journals[st.active].gen; got != gen+1 {
		t.Fatalf("after a failed fdatasync the journal is at generation %d, want %d (a new one)", got, gen+1)
	}
	got := reopened(t, st, path)
	if _, ok := got["sb_acked"]; !ok || len(got) != 1 {
		t.Fatalf("after a crash following a failed fdatasync the store holds %v, want only sb_acked", slices.Sorted(maps.Keys(got)))
	}
}

// While fdatasync keeps failing no write is acknowledged, and none is
// appended after the first failure; once it works again the store takes
// writes, and holds exactly the acknowledged ones.
func TestStore_WhileFdatasyncFailsNothingIsAcknowledgedAndTheStoreRecovers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.db")
	fs := &faultySync{}
	st := openFaulty(t, path, fs)
	if err := st.commit(putOp("sb_before")); err != nil {
		t.Fatal(err)
	}
	fs.failNext(1 << 30)
	for i := range 5 {
		if err := st.commit(putOp(fmt.Sprintf("sb_failed_%d", i))); err == nil {
			t.Fatalf("write %d acknowledged while fdatasync fails", i)
		}
	}
	fs.failNext(0)
	if err := st.commit(putOp("sb_after")); err != nil {
		t.Fatalf("the first write once fdatasync works: %v", err)
	}
	got := reopened(t, st, path)
	if want := []string{"sb_after", "sb_before"}; !slices.Equal(slices.Sorted(maps.Keys(got)), want) {
		t.Fatalf("the store holds %v, want %v", slices.Sorted(maps.Keys(got)), want)
	}
}

// A rotation whose new generation cannot be started (the other file's
// fdatasync fails) loses nothing: the records stay in the full
// generation, which keeps taking writes, and the next rotation succeeds.
func TestStore_AFailedRotationLosesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.db")
	fs := &faultySync{}
	st := openFaulty(t, path, fs)
	other := &faultySync{failures: 1 << 30}
	st.journals[1].syncFile = other.sync
	pad := strings.Repeat("x", 64<<10)
	want := map[string]string{}
	write := func(i int) {
		t.Helper()
		id := fmt.Sprintf("sb_%04d", i)
		o := journalOp{key: []byte(id), val: fmt.Appendf(nil, `{"id":%q,"metadata":{"pad":%q}}`, id, pad)}
		if i%5 == 4 {
			o = journalOp{key: fmt.Appendf(nil, "sb_%04d", i-1)}
		}
		if err := st.commit(o); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		want = applyOps(want, []journalOp{o})
	}
	i := 0
	for ; st.journals[0].size() < storeCheckpointBytes+(1<<20); i++ {
		write(i)
	}
	if st.active != 0 || other.calls == 0 {
		t.Fatalf("the rotation was not tried (active %d, %d syncs of the other file)", st.active, other.calls)
	}
	other.failNext(0)
	for ; st.active == 0; i++ {
		write(i)
	}
	write(i)
	if got := reopened(t, st, path); !maps.Equal(got, want) {
		t.Fatalf("after the failed and the good rotation the store holds %d records, want %d", len(got), len(want))
	}
}

// Closing the store while a group commit is in flight (Node.Close gives up
// waiting for API operations at its deadline) waits for it: the write is
// appended and synced to the open file and answered, never written to a
// closed (or reused) descriptor; a write after close fails.
func TestStore_CloseWaitsForTheGroupCommitInFlight(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.db")
	st, err := openStore(path, false)
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	st.beforeAppend = func(int) error {
		close(entered)
		<-release
		return nil
	}
	wrote := make(chan error, 1)
	go func() { wrote <- st.commit(putOp("sb_in_flight")) }()
	<-entered
	closed := make(chan error, 1)
	go func() { closed <- st.close() }()
	require.Eventually(t, func() bool {
		select {
		case err := <-closed:
			closed <- err
			return true
		default:
		}
		st.group.mu.Lock()
		defer st.group.mu.Unlock()
		return st.group.closed
	}, waitWithin, waitTick)
	select {
	case <-closed:
		t.Fatal("close returned while a group commit was in flight")
	default:
	}
	close(release)
	if err := <-wrote; err != nil {
		t.Fatalf("the write in flight at close: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if err := st.commit(putOp("sb_late")); !errors.Is(err, errStoreClosed) {
		t.Fatalf("a write after close answered %v", err)
	}
	if got := reopened(t, st, path); !slices.Equal(slices.Sorted(maps.Keys(got)), []string{"sb_in_flight"}) {
		t.Fatalf("after close the store holds %v", slices.Sorted(maps.Keys(got)))
	}
}

// Journal files whose bbolt file is gone (an operator removed node.db to
// start the node afresh) are not replayed into the new one: their claims
// belong to a table that no longer exists. Their generations are not
// reused either, so they are never replayed later.
func TestStore_JournalsOfARemovedStoreAreNotReplayed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.db")
	st, err := openStore(path, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.commit(putOp("sb_of_the_old_table")); err != nil {
		t.Fatal(err)
	}
	if err := st.close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		st, err := openStore(path, true)
		if err != nil {
			t.Fatal(err)
		}
		got := boltContents(t, st)
		if err := st.commit(putOp("sb_new")); err != nil {
			t.Fatal(err)
		}
		_ = st.close()
		if _, ok := got["sb_of_the_old_table"]; ok {
			t.Fatalf("a new node.db holds %v: the old table's journal was replayed into it", slices.Sorted(maps.Keys(got)))
		}
	}
}

// A release whose record cannot be deleted (the disk fails) is not
// acknowledged: it answers 500 and the sandbox stays claimed, so a retry
// releases it — acknowledged, it would have come back at the next start
// (the record stays in the store).
func TestRelease_ARecordThatCannotBeDeletedFailsTheReleaseAndKeepsTheSandbox(t *testing.T) {
	tn := startNode(t, newFakeDriver(), nil)
	if _, err := tn.root.PutPools(bg, pools("img", 1)); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 1)
	a, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img"})
	if err != nil {
		t.Fatal(err)
	}
	fs := &faultySync{}
	for _, j := range tn.store.journals {
		j.syncFile = fs.sync
	}
	fs.failNext(1 << 30)
	if err := tn.root.Release(bg, a.ID); nodeapi.StatusOf(err) != 500 {
		t.Fatalf("a release whose record could not be deleted answered %v", err)
	}
	if _, err := tn.root.Get(bg, a.ID); err != nil {
		t.Fatalf("after the failed release: %v; the sandbox should still be there", err)
	}
	fs.failNext(0)
	if err := tn.root.Release(bg, a.ID); err != nil {
		t.Fatalf("the retried release: %v", err)
	}
	if _, err := tn.root.Get(bg, a.ID); nodeapi.StatusOf(err) != 404 {
		t.Fatalf("released sandbox still there: %v", err)
	}
	recs, err := tn.store.sandboxes()
	if err != nil || len(recs) != 0 {
		t.Fatalf("the store still holds %d records (%v) after the release", len(recs), err)
	}
}

// A node configured with nothing about durability syncs its claim store:
// StoreNoSync (development and benchmarks) is off unless set, and no
// daemon flag sets it.
func TestNode_DefaultConfigSyncsTheClaimStore(t *testing.T) {
	tn := startNode(t, newFakeDriver(), nil)
	st := tn.store
	if st.noSync || st.db.NoSync || st.journals[0].noSync || st.journals[1].noSync {
		t.Fatal("a node with the default config does not sync its claim store")
	}
}
