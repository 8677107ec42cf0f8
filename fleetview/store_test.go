package fleetview

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"

	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/nodeapi"
)

var t0 = time.Unix(1_700_000_000, 0)

func sb(id, ref string) nodeapi.Sandbox {
	return nodeapi.Sandbox{ID: id, ClaimRef: ref, Template: "img", Net: "none", Size: "small", AgentAddr: "10.0.0.1:49983",
		Deadline: t0.Add(time.Hour), ClaimedAt: t0}
}

func published(node, addr string, sbs ...nodeapi.Sandbox) *inventory.NodeInventory {
	inv := &inventory.NodeInventory{Node: node, Address: addr, Pools: []inventory.Pool{{Template: "img", Warm: 3, Target: 3}}}
	inv.Name = node
	for i := range sbs {
		sbs[i].Node = node
		inv.Entries = append(inv.Entries, inventory.EntryOf(&sbs[i]))
	}
	return inv
}

func snapshot(epoch string, rev uint64, sbs ...nodeapi.Sandbox) nodeapi.WatchEvent {
	return nodeapi.WatchEvent{Type: nodeapi.WatchSnapshot, Epoch: epoch, Rev: rev,
		Snapshot: &nodeapi.WatchState{Sandboxes: sbs, Pools: []nodeapi.PoolInfo{{Template: "img", Warm: 2, Target: 3}}}}
}

func put(epoch string, rev uint64, s nodeapi.Sandbox) nodeapi.WatchEvent {
	return nodeapi.WatchEvent{Type: nodeapi.WatchPut, Epoch: epoch, Rev: rev, Sandbox: &s}
}

func del(epoch string, rev uint64, s nodeapi.Sandbox) nodeapi.WatchEvent {
	return nodeapi.WatchEvent{Type: nodeapi.WatchDelete, Epoch: epoch, Rev: rev, Sandbox: &s}
}

func mustApply(t *testing.T, s *Store, node string, evs ...nodeapi.WatchEvent) {
	t.Helper()
	for _, ev := range evs {
		if err := s.Apply(node, ev, t0); err != nil {
			t.Fatalf("apply %s %d: %v", ev.Type, ev.Rev, err)
		}
	}
}

// changes renders the changes after rv as "TYPE name" strings.
func changes(t *testing.T, s *Store, rv uint64) []string {
	t.Helper()
	cs, _, _, err := s.Since(rv, 0)
	if err != nil {
		t.Fatalf("since %d: %v", rv, err)
	}
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s %s@%s", c.Type, c.Item.Entry.Name, c.Item.Node.Name))
	}
	return out
}

func names(s *Store) map[string]string {
	items, _ := s.List(nil)
	out := map[string]string{}
	for _, it := range items {
		out[it.Entry.Name] = it.Entry.ID
	}
	return out
}

func eq(t *testing.T, got, want []string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}

func TestSince_KnownRevisionGetsOnlyLaterChanges(t *testing.T) {
	s := NewStore(0)
	s.SetPublished(published("n1", "a:1"), t0)
	mustApply(t, s, "n1", snapshot("e1", 10, sb("sb_a", "ns/a")))
	_, rv := s.List(nil)
	mustApply(t, s, "n1", put("e1", 11, sb("sb_b", "ns/b")))
	paused := sb("sb_a", "ns/a")
	paused.Paused = true
	mustApply(t, s, "n1", put("e1", 12, paused), del("e1", 13, sb("sb_b", "ns/b")))
	eq(t, changes(t, s, rv), []string{"ADDED ns/b@n1", "MODIFIED ns/a@n1", "DELETED ns/b@n1"})
	// From the revision of the MODIFIED: only the DELETED.
	cs, _, _, _ := s.Since(rv, 0)
	eq(t, changes(t, s, cs[1].Rev), []string{"DELETED ns/b@n1"})
	// The current revision: nothing, and a channel closed at the next change.
	_, end, wake, err := s.Since(s.Rev(), 0)
	if err != nil || end != s.Rev() {
		t.Fatal(err)
	}
	mustApply(t, s, "n1", put("e1", 14, sb("sb_c", "ns/c")))
	select {
	case <-wake:
	default:
		t.Fatal("not woken by a change")
	}
}

func TestSince_UnknownOrOldRevisionIsExpired(t *testing.T) {
	s := NewStore(4)
	s.SetPublished(published("n1", "a:1"), t0)
	mustApply(t, s, "n1", snapshot("e1", 1))
	first := s.Rev()
	for i := 0; i < 6; i++ {
		mustApply(t, s, "n1", put("e1", uint64(2+i), sb(fmt.Sprint("sb_", i), fmt.Sprint("ns/", i))))
	}
	other := NewStore(4) // another replica, or this one before a restart
	other.tag = s.tag ^ 1
	other.seq = s.seq
	step := uint64(1) << revTagBits
	for name, rv := range map[string]uint64{
		"evicted": first, "one past the window": s.Rev() - 5*step, "another replica's": other.Rev(),
		"in the future": s.Rev() + step, "zero": 0,
	} {
		if _, _, _, err := s.Since(rv, 0); !errors.Is(err, inventory.ErrExpired) {
			t.Errorf("%s revision: %v, want ErrExpired", name, err)
		}
	}
	// The last 4 changes are still resumable.
	if cs, _, _, err := s.Since(s.Rev()-4*step, 0); err != nil || len(cs) != 4 {
		t.Fatalf("resumable window: %d changes, %v", len(cs), err)
	}
}

func TestApply_GapOrOtherEpochAsksForResync(t *testing.T) {
	s := NewStore(0)
	s.SetPublished(published("n1", "a:1"), t0)
	if err := s.Apply("n1", put("e1", 1, sb("sb_a", "ns/a")), t0); !errors.Is(err, ErrResync) {
		t.Fatalf("an event before any SNAPSHOT: %v", err)
	}
	mustApply(t, s, "n1", snapshot("e1", 5))
	if err := s.Apply("n1", put("e1", 7, sb("sb_a", "ns/a")), t0); !errors.Is(err, ErrResync) {
		t.Fatalf("a gap: %v", err)
	}
	if err := s.Apply("n1", put("e2", 6, sb("sb_a", "ns/a")), t0); !errors.Is(err, ErrResync) {
		t.Fatalf("another epoch: %v", err)
	}
	if p := s.Position("n1"); p.Epoch != "e1" || p.Rev != 5 {
		t.Fatalf("position %+v", p)
	}
}

// A node restart is a new epoch whose revisions start again: the
// subscriber's SNAPSHOT of the new epoch yields exactly the differences.
func TestApply_NodeRestartResyncsWithoutDuplicatesOrLosses(t *testing.T) {
	s := NewStore(0)
	s.SetPublished(published("n1", "a:1"), t0)
	mustApply(t, s, "n1", snapshot("boot1", 3, sb("sb_a", "ns/a"), sb("sb_b", "ns/b")))
	rv := s.Rev()
	// While the node was restarting, b was released and c claimed; a survived.
	if err := s.Apply("n1", put("boot2", 1, sb("sb_c", "ns/c")), t0); !errors.Is(err, ErrResync) {
		t.Fatalf("an event of the new epoch without its SNAPSHOT: %v", err)
	}
	mustApply(t, s, "n1", snapshot("boot2", 2, sb("sb_a", "ns/a"), sb("sb_c", "ns/c")))
	eq(t, changes(t, s, rv), []string{"DELETED ns/b@n1", "ADDED ns/c@n1"})
	if got := names(s); len(got) != 2 || got["ns/a"] != "sb_a" || got["ns/c"] != "sb_c" {
		t.Fatalf("after resync: %v", got)
	}
	// Revisions of the new epoch continue from its SNAPSHOT.
	mustApply(t, s, "n1", del("boot2", 3, sb("sb_a", "ns/a")))
	if p := s.Position("n1"); p.Epoch != "boot2" || p.Rev != 3 {
		t.Fatalf("position %+v", p)
	}
}

func TestStreamDown_FallsBackToPublishedAndIsFlagged(t *testing.T) {
	s := NewStore(0)
	s.SetPublished(published("n1", "a:1", sb("sb_old", "ns/old")), t0)
	if got := names(s); got["ns/old"] != "sb_old" {
		t.Fatalf("before any stream the published entries serve: %v", got)
	}
	later := t0.Add(time.Second)
	if err := s.Apply("n1", snapshot("e1", 1, sb("sb_a", "ns/a")), later); err != nil {
		t.Fatal(err)
	}
	s.SetPublished(published("n1", "a:1", sb("sb_stale", "ns/stale")), later) // ignored while live
	if got := names(s); len(got) != 1 || got["ns/a"] != "sb_a" {
		t.Fatalf("live: %v", got)
	}
	if st := s.Nodes(); !st[0].Live {
		t.Fatalf("status %+v", st)
	}
	// Down: the last publish is no newer than the stream's last event, so
	// the stream's state stays until the next publish.
	s.StreamDown("n1", later.Add(time.Second))
	if st := s.Nodes(); st[0].Live || st[0].Since.IsZero() {
		t.Fatalf("status after down: %+v", st)
	}
	if got := names(s); got["ns/a"] != "sb_a" {
		t.Fatalf("kept the stream's state: %v", got)
	}
	s.SetPublished(published("n1", "a:1", sb("sb_pub", "ns/pub")), later.Add(2*time.Second))
	if got := names(s); len(got) != 1 || got["ns/pub"] != "sb_pub" {
		t.Fatalf("fallback to the published object: %v", got)
	}
	if p := s.Position("n1"); p.Epoch != "" {
		t.Fatalf("after a fallback the stream must resync: %+v", p)
	}
	// The stream is back: a SNAPSHOT replaces the fallback.
	mustApply(t, s, "n1", snapshot("e1", 9, sb("sb_a", "ns/a")))
	if got := names(s); len(got) != 1 || got["ns/a"] != "sb_a" || !s.Nodes()[0].Live {
		t.Fatalf("back live: %v", got)
	}
}

func TestNames_DuplicateNameHasOneSpeaker(t *testing.T) {
	s := NewStore(0)
	s.SetPublished(published("n1", "a:1"), t0)
	s.SetPublished(published("n2", "b:1"), t0)
	mustApply(t, s, "n1", snapshot("e1", 1, sb("sb_1", "ns/x")))
	mustApply(t, s, "n2", snapshot("e2", 1))
	rv := s.Rev()
	mustApply(t, s, "n2", put("e2", 2, sb("sb_2", "ns/x")))
	mustApply(t, s, "n1", del("e1", 2, sb("sb_1", "ns/x")))
	mustApply(t, s, "n2", del("e2", 3, sb("sb_2", "ns/x")))
	eq(t, changes(t, s, rv), []string{"MODIFIED ns/x@n2", "DELETED ns/x@n2"})
}

func TestRemoveNode_DeletesItsEntriesOnly(t *testing.T) {
	s := NewStore(0)
	s.SetPublished(published("n1", "a:1", sb("sb_1", "ns/1")), t0)
	s.SetPublished(published("n2", "b:1", sb("sb_2", "ns/2")), t0)
	rv := s.Rev()
	s.RemoveNode("n1")
	eq(t, changes(t, s, rv), []string{"DELETED ns/1@n1"})
	if got := names(s); len(got) != 1 || got["ns/2"] != "sb_2" {
		t.Fatalf("%v", got)
	}
}

// Lookups by name and by claim id read the store as of the last applied
// change: a stream event, a node's SNAPSHOT, a published object adopted.
func TestLookups_ByNameAndIDFollowEveryChange(t *testing.T) {
	s := NewStore(0)
	s.SetPublished(published("n1", "a:1", sb("sb_1", "ns/1")), t0)
	s.SetPublished(published("n2", "b:1"), t0)
	mustApply(t, s, "n2", snapshot("e2", 1, sb("sb_2", "ns/2")))
	type want struct {
		key, node, id string // id "" means absent
	}
	check := func(step string, byName, byID []want) {
		t.Helper()
		for _, w := range byName {
			it, ok := s.Current(w.key)
			if w.id == "" {
				if ok {
					t.Errorf("%s: Current(%s) = %s, want none", step, w.key, it.Entry.ID)
				}
				continue
			}
			if !ok || it.Entry.ID != w.id || it.Node.Name != w.node {
				t.Errorf("%s: Current(%s) = %+v %v, want %s on %s", step, w.key, it.Item, ok, w.id, w.node)
			}
		}
		for _, w := range byID {
			it, ok := s.CurrentByID(w.key)
			if w.id == "" {
				if ok {
					t.Errorf("%s: CurrentByID(%s) found on %s, want none", step, w.key, it.Node.Name)
				}
				continue
			}
			if !ok || it.Entry.ID != w.id || it.Node.Name != w.node || it.Node.Address == "" {
				t.Errorf("%s: CurrentByID(%s) = %+v %v, want on %s", step, w.key, it.Item, ok, w.node)
			}
		}
	}
	check("published + snapshot",
		[]want{{"ns/1", "n1", "sb_1"}, {"ns/2", "n2", "sb_2"}, {"ns/3", "", ""}},
		[]want{{"sb_1", "n1", "sb_1"}, {"sb_2", "n2", "sb_2"}, {"sb_3", "", ""}})

	mustApply(t, s, "n2", put("e2", 2, sb("sb_3", "ns/3")))
	check("a PUT",
		[]want{{"ns/3", "n2", "sb_3"}},
		[]want{{"sb_3", "n2", "sb_3"}})

	mustApply(t, s, "n2", del("e2", 3, sb("sb_2", "ns/2")))
	check("a DELETE",
		[]want{{"ns/2", "", ""}, {"ns/3", "n2", "sb_3"}},
		[]want{{"sb_2", "", ""}, {"sb_3", "n2", "sb_3"}})

	// A second claim of ns/1 on n2: the name keeps its first speaker, the
	// new id is found by id; when the first goes, the name moves.
	mustApply(t, s, "n2", put("e2", 4, sb("sb_4", "ns/1")))
	check("a duplicate name",
		[]want{{"ns/1", "n1", "sb_1"}},
		[]want{{"sb_1", "n1", "sb_1"}, {"sb_4", "n2", "sb_4"}})
	s.RemoveNode("n1")
	check("its node left",
		[]want{{"ns/1", "n2", "sb_4"}},
		[]want{{"sb_1", "", ""}, {"sb_4", "n2", "sb_4"}})

	// A changed entry (paused) is a new record: both indexes follow it.
	p := sb("sb_3", "ns/3")
	p.Paused = true
	mustApply(t, s, "n2", put("e2", 5, p))
	if it, ok := s.CurrentByID("sb_3"); !ok || it.Entry.Phase != "Paused" {
		t.Errorf("after pause: %+v %v", it.Item.Entry, ok)
	}
	if it, ok := s.Current("ns/3"); !ok || it.Entry.Phase != "Paused" {
		t.Errorf("after pause by name: %+v %v", it.Item.Entry, ok)
	}
}

func TestRec_StaysCompact(t *testing.T) {
	if got := unsafe.Sizeof(rec{}); got > 64 {
		t.Fatalf("rec is %d bytes; the heap budget per sandbox assumes 64", got)
	}
}

// TestRecIndex_Model drives the index with random adds, deletes and swaps
// over few keys (so runs hold duplicates, wrap around shard ends and grow)
// and checks it against a model that keeps every key's entries in arrival
// order: first is the earliest still present, find finds each entry,
// firsts yields each key's first once.
func TestRecIndex_Model(t *testing.T) {
	for _, byID := range []bool{false, true} {
		rng := rand.New(rand.NewPCG(1, 2))
		x := newRecIndex(byID)
		nodes := []*nodeState{{name: "a"}, {name: "b"}}
		var live []*rec // arrival order
		mk := func(i int) *rec {
			name, id := fmt.Sprintf("ns/s%d", rng.IntN(40)), fmt.Sprintf("id%d", rng.IntN(40))
			return &rec{key: name + id, split: uint16(len(name)), node: nodes[i%2]}
		}
		for step := 0; step < 20000; step++ {
			switch op := rng.IntN(10); {
			case op < 5 || len(live) == 0:
				r := mk(step)
				x.add(r)
				live = append(live, r)
			case op < 8:
				i := rng.IntN(len(live))
				x.del(live[i])
				live = append(live[:i], live[i+1:]...)
			default:
				i := rng.IntN(len(live))
				old := live[i]
				r := &rec{key: old.key, split: old.split, node: old.node}
				x.swap(old, r)
				live[i] = r
			}
			if step%97 != 0 {
				continue
			}
			if x.len() != len(live) {
				t.Fatalf("byID=%v step %d: len %d, want %d", byID, step, x.len(), len(live))
			}
			want := map[string]*rec{}
			for _, r := range live {
				if _, ok := want[x.key(r)]; !ok {
					want[x.key(r)] = r
				}
				if got := x.find(x.key(r), r.node, r.id()); got == nil || got.node != r.node || got.id() != r.id() || x.key(got) != x.key(r) {
					t.Fatalf("byID=%v step %d: find(%s) = %v", byID, step, x.key(r), got)
				}
			}
			for k, r := range want {
				if got := x.first(k); got != r {
					t.Fatalf("byID=%v step %d: first(%s) is not the earliest arrival", byID, step, k)
				}
			}
			seen := map[string]bool{}
			x.firsts(func(r *rec) {
				k := x.key(r)
				if seen[k] || want[k] != r {
					t.Fatalf("byID=%v step %d: firsts gave %s twice or not its first", byID, step, k)
				}
				seen[k] = true
			})
			if len(seen) != len(want) {
				t.Fatalf("byID=%v step %d: firsts gave %d keys, want %d", byID, step, len(seen), len(want))
			}
			if x.first("ns/none") != nil {
				t.Fatalf("first of an absent key")
			}
		}
	}
}

// TestClaimTime_MillisecondsSurviveAPublishedFallback: a stream's claim
// time keeps its milliseconds (two sandboxes claimed within one second
// order by it), and falling back to the node's published object — whose
// JSON carries whole seconds — changes no entry.
func TestClaimTime_MillisecondsSurviveAPublishedFallback(t *testing.T) {
	s := NewStore(0)
	a, b := sb("sb_a", "ns/a"), sb("sb_b", "ns/b")
	a.ClaimedAt, b.ClaimedAt = t0.Add(120*time.Millisecond), t0.Add(999*time.Millisecond+999*time.Microsecond)
	s.SetPublished(published("n1", "a:1"), t0)
	mustApply(t, s, "n1", snapshot("e1", 1, a, b))
	want := map[string]time.Time{"sb_a": t0.Add(120 * time.Millisecond), "sb_b": t0.Add(999 * time.Millisecond)}
	check := func(when string) {
		t.Helper()
		for id, at := range want {
			it, ok := s.CurrentByID(id)
			if !ok {
				t.Errorf("%s: %s is gone", when, id)
				continue
			}
			if it.Entry.ClaimedAt == nil || !it.Entry.ClaimedAt.Time.Equal(at) {
				t.Errorf("%s: %s claimedAt %v, want %v", when, id, it.Entry.ClaimedAt, at)
			}
		}
	}
	check("streamed")

	var pub inventory.NodeInventory // what a reader of the API gets back
	raw, err := json.Marshal(published("n1", "a:1", a, b))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &pub); err != nil {
		t.Fatal(err)
	}
	if pub.Entries[0].ClaimedAt.Nanosecond() != 0 {
		t.Fatalf("a published claim time has a fraction: %v", pub.Entries[0].ClaimedAt)
	}
	rv := s.Rev()
	s.StreamDown("n1", t0.Add(time.Second))
	s.SetPublished(&pub, t0.Add(2*time.Second))
	eq(t, changes(t, s, rv), nil)
	check("after the fallback")
}

// TestAwaitID_WakesOnTheChangeOrGivesUpWithItsContext.
func TestAwaitID_WakesOnTheChangeOrGivesUpWithItsContext(t *testing.T) {
	s := NewStore(0)
	s.SetPublished(published("n1", "a:1"), t0)
	mustApply(t, s, "n1", snapshot("e1", 1))
	present := func(_ inventory.Versioned, ok bool) bool { return ok }
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if s.AwaitID(ctx, "sb_x", present) {
		t.Fatal("an entry nobody adds: AwaitID must give up with its context")
	}
	go func() { _ = s.Apply("n1", put("e1", 2, sb("sb_x", "ns/x")), t0) }()
	if !s.AwaitID(context.Background(), "sb_x", present) {
		t.Fatal("AwaitID returned false without a deadline")
	}
	if !s.AwaitID(context.Background(), "sb_x", present) {
		t.Fatal("a condition that already holds returns at once")
	}
}

// TestE2B_VisibilityKeptFromStreamAndPublished: a sandbox's e2b visibility
// (nodeapi.Lifecycle.E2B, which the e2b gateway's lists filter by) reaches
// the view's entries whether they came from a node's change stream or its
// published NodeInventory, and the entry's sandbox reports it; a record
// that differs only in it is a change.
func TestE2B_VisibilityKeptFromStreamAndPublished(t *testing.T) {
	e2b := func(s nodeapi.Sandbox) nodeapi.Sandbox { s.E2B = true; return s }
	s := NewStore(0)
	s.SetPublished(published("n1", "a:1", e2b(sb("sb_1", "ns/1")), sb("sb_2", "ns/2")), t0)
	s.SetPublished(published("n2", "b:1"), t0)
	mustApply(t, s, "n2", snapshot("e2", 1, e2b(sb("sb_3", "ns/3")), sb("sb_4", "ns/4")))
	mustApply(t, s, "n2", put("e2", 2, e2b(sb("sb_5", "ns/5"))))
	check := func(step string, want map[string]bool) {
		t.Helper()
		for id, w := range want {
			it, ok := s.CurrentByID(id)
			if !ok {
				t.Fatalf("%s: %s not in the view", step, id)
			}
			if it.Entry.E2B != w || it.Sandbox().E2B != w {
				t.Errorf("%s: %s: entry e2b %v, sandbox e2b %v, want %v", step, id, it.Entry.E2B, it.Sandbox().E2B, w)
			}
		}
	}
	check("stream and published", map[string]bool{"sb_1": true, "sb_2": false, "sb_3": true, "sb_4": false, "sb_5": true})
	rv := s.Rev()
	mustApply(t, s, "n2", put("e2", 3, sb("sb_5", "ns/5")))
	eq(t, changes(t, s, rv), []string{"MODIFIED ns/5@n2"})
	check("changed", map[string]bool{"sb_5": false})
}

// TestMetadata_FromTheStreamKeptAcrossAPublishedFallback: a claim's
// metadata (e2b's, which its list filter reads) reaches the view's entry
// from the node's change stream; the published NodeInventory carries none,
// and falling back to it keeps the stream's metadata for each claim id
// without a change, while a claim only the published object shows has
// none.
func TestMetadata_FromTheStreamKeptAcrossAPublishedFallback(t *testing.T) {
	md := func(s nodeapi.Sandbox, v string) nodeapi.Sandbox { s.Metadata = map[string]string{"bar": v}; return s }
	s := NewStore(0)
	s.SetPublished(published("n1", "a:1"), t0)
	mustApply(t, s, "n1", snapshot("e1", 1, md(sb("sb_1", "ns/1"), "x")), put("e1", 2, md(sb("sb_2", "ns/2"), "y")))
	check := func(step string, want map[string]string) {
		t.Helper()
		for id, w := range want {
			it, ok := s.CurrentByID(id)
			if !ok {
				t.Fatalf("%s: %s not in the view", step, id)
			}
			if it.Entry.Metadata["bar"] != w || it.Sandbox().Metadata["bar"] != w {
				t.Errorf("%s: %s: entry metadata %v, sandbox metadata %v, want bar=%q", step, id, it.Entry.Metadata, it.Sandbox().Metadata, w)
			}
		}
		n := 0
		for _, w := range want {
			if w != "" {
				n++
			}
		}
		if items, _ := s.List(func(it inventory.Item) bool { return it.Entry.Metadata["bar"] != "" }); len(items) != n {
			t.Errorf("%s: a list filtered on metadata has %d entries, want %d", step, len(items), n)
		}
	}
	check("streamed", map[string]string{"sb_1": "x", "sb_2": "y"})

	// What the node publishes: no metadata (node.Inventory leaves it out);
	// an older NodeInventory schema prunes net and size too.
	pub := published("n1", "a:1", sb("sb_1", "ns/1"), sb("sb_2", "ns/2"), sb("sb_3", "ns/3"))
	pub.Entries[1].Net, pub.Entries[1].Size = "", ""
	rv := s.Rev()
	s.StreamDown("n1", t0.Add(time.Second))
	s.SetPublished(pub, t0.Add(2*time.Second))
	eq(t, changes(t, s, rv), []string{"ADDED ns/3@n1"})
	check("after the fallback", map[string]string{"sb_1": "x", "sb_2": "y", "sb_3": ""})
	if it, _ := s.CurrentByID("sb_2"); it.Entry.Net != "none" || it.Entry.Size != "small" || it.Sandbox().Size != "small" {
		t.Errorf("sb_2's pool key after a fallback that pruned it: %+v", it.Entry)
	}
	for _, e := range pub.Entries {
		if e.Metadata != nil {
			t.Fatalf("the published object was written to: %+v", e)
		}
	}

	// The stream back: the same metadata is no change; sb_3's is.
	rv = s.Rev()
	mustApply(t, s, "n1", snapshot("e2", 1, md(sb("sb_1", "ns/1"), "x"), md(sb("sb_2", "ns/2"), "y"), md(sb("sb_3", "ns/3"), "z")))
	eq(t, changes(t, s, rv), []string{"MODIFIED ns/3@n1"})
	check("stream back", map[string]string{"sb_1": "x", "sb_2": "y", "sb_3": "z"})
}
