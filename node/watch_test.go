package node

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/hearthvm/hearth/nodeapi"
)

// collect runs a Watch from pos in the background and hands its events
// over a channel.
func collect(t *testing.T, c *nodeapi.Client, pos nodeapi.WatchPosition) (<-chan nodeapi.WatchEvent, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan nodeapi.WatchEvent, 1024)
	go func() {
		_ = c.Watch(ctx, pos, 5*time.Second, func(ev nodeapi.WatchEvent) error {
			ch <- ev
			return nil
		})
	}()
	t.Cleanup(cancel)
	return ch, cancel
}

// next returns the next event that is not a KEEPALIVE or POOL.
func next(t *testing.T, ch <-chan nodeapi.WatchEvent) nodeapi.WatchEvent {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case ev := <-ch:
			if ev.Type == nodeapi.WatchKeepalive || ev.Type == nodeapi.WatchPool {
				continue
			}
			return ev
		case <-timeout:
			t.Fatal("no event within 5s")
		}
	}
}

func TestWatch_SnapshotThenChangesThenResumeWithoutSnapshot(t *testing.T) {
	tn := startNode(t, newFakeDriver(), nil)
	if _, err := tn.root.PutPools(bg, pools("img", 3)); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 3)
	a, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/a"})
	if err != nil {
		t.Fatal(err)
	}
	ch, stop := collect(t, tn.root, nodeapi.WatchPosition{})
	snap := next(t, ch)
	if snap.Type != nodeapi.WatchSnapshot || snap.Epoch == "" || len(snap.Snapshot.Sandboxes) != 1 || snap.Snapshot.Sandboxes[0].ID != a.ID {
		t.Fatalf("first event: %+v", snap)
	}
	if snap.Snapshot.Sandboxes[0].Token != "" {
		t.Fatal("a stream carries no tokens")
	}
	b, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/b"})
	if err != nil {
		t.Fatal(err)
	}
	put := next(t, ch)
	if put.Type != nodeapi.WatchPut || put.Sandbox.ID != b.ID || put.Rev <= snap.Rev || put.Epoch != snap.Epoch {
		t.Fatalf("after claim: %+v", put)
	}
	stop()

	// Changes while nobody listens are replayed from the ring, in order,
	// with no SNAPSHOT.
	if err := tn.root.Pause(bg, a.ID); err != nil {
		t.Fatal(err)
	}
	if err := tn.root.Release(bg, b.ID); err != nil {
		t.Fatal(err)
	}
	ch, _ = collect(t, tn.root, nodeapi.WatchPosition{Epoch: put.Epoch, Rev: put.Rev})
	got := []nodeapi.WatchEvent{next(t, ch), next(t, ch)}
	if got[0].Type != nodeapi.WatchPut || got[0].Sandbox.ID != a.ID || !got[0].Sandbox.Paused {
		t.Fatalf("resumed first: %+v", got[0])
	}
	if got[1].Type != nodeapi.WatchDelete || got[1].Sandbox.ID != b.ID {
		t.Fatalf("resumed second: %+v", got[1])
	}

	// Another epoch (a restarted node) or an unknown revision gets a SNAPSHOT.
	for _, pos := range []nodeapi.WatchPosition{{Epoch: "other", Rev: 1}, {Epoch: put.Epoch, Rev: 1 << 40}} {
		ch, _ := collect(t, tn.root, pos)
		if ev := next(t, ch); ev.Type != nodeapi.WatchSnapshot || len(ev.Snapshot.Sandboxes) != 1 || !ev.Snapshot.Sandboxes[0].Paused {
			t.Fatalf("from %+v: %+v", pos, ev)
		}
	}
}

func TestWatch_NeedsRootAndSendsKeepalives(t *testing.T) {
	tn := startNode(t, newFakeDriver(), nil)
	err := nodeapi.NewClient(tn.srv.URL, "wrong").Watch(bg, nodeapi.WatchPosition{}, time.Second, func(nodeapi.WatchEvent) error { return nil })
	if nodeapi.StatusOf(err) != 401 {
		t.Fatalf("wrong token: %v", err)
	}
	// A stream with nothing to say stays open past the idle bound only
	// thanks to keepalives: it must end by fn's error, not ErrWatchIdle.
	done := errors.New("saw a keepalive")
	err = tn.root.Watch(bg, nodeapi.WatchPosition{}, 2*watchKeepalive, func(ev nodeapi.WatchEvent) error {
		if ev.Type == nodeapi.WatchKeepalive {
			return done
		}
		return nil
	})
	if !errors.Is(err, done) {
		t.Fatalf("want a keepalive, got %v", err)
	}
}

func TestHub_RingEvictionFallsBackToSnapshot(t *testing.T) {
	h := newHub()
	for i := 0; i < watchRing+10; i++ {
		h.put(&nodeapi.Sandbox{ID: "sb_1", Deadline: time.Unix(int64(i), 0)})
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	evs, rev, _ := h.since(nodeapi.WatchPosition{Epoch: h.epoch, Rev: 5}, "n1", "")
	if len(evs) != 1 || evs[0].Type != nodeapi.WatchSnapshot || rev != watchRing+10 {
		t.Fatalf("evicted position: %d events, first %s, rev %d", len(evs), evs[0].Type, rev)
	}
	evs, _, _ = h.since(nodeapi.WatchPosition{Epoch: h.epoch, Rev: rev - 3}, "n1", "")
	if len(evs) != 3 || evs[0].Rev != rev-2 || evs[2].Rev != rev {
		t.Fatalf("recent position: %+v", evs)
	}
	evs, _, _ = h.since(nodeapi.WatchPosition{Epoch: h.epoch, Rev: h.oldest() - 1}, "n1", "")
	if len(evs) != watchRing || evs[0].Type != nodeapi.WatchPut {
		t.Fatalf("oldest position: %d events", len(evs))
	}
}

// TestHub_AppendsOneEventPerPublishedChange is the stream's pure core: each
// change handed to the hub appends an event exactly when what the stream
// publishes of that sandbox or pool differs.
func TestHub_AppendsOneEventPerPublishedChange(t *testing.T) {
	dl := time.Unix(1_800_000_000, 0)
	sb := func(paused bool, deadline time.Time, version int64) *nodeapi.Sandbox {
		return &nodeapi.Sandbox{ID: "sb_1", ClaimRef: "ns/a", Template: "img", Paused: paused, Deadline: deadline, Version: version}
	}
	row := func(warm, target int32) nodeapi.PoolInfo {
		return nodeapi.PoolInfo{Template: "img", Net: "none", Size: "small", Warm: warm, Target: target}
	}
	type step struct {
		name string
		do   func(h *hub) bool
		want nodeapi.WatchEventType // "" when no event
	}
	steps := []step{
		{"a new sandbox", func(h *hub) bool { return h.put(sb(false, dl, 1)) }, nodeapi.WatchPut},
		{"a change the stream does not carry (version)", func(h *hub) bool { return h.put(sb(false, dl, 2)) }, ""},
		{"a deadline moved within its second", func(h *hub) bool { return h.put(sb(false, dl.Add(300*time.Millisecond), 3)) }, ""},
		{"a pause", func(h *hub) bool { return h.put(sb(true, dl, 4)) }, nodeapi.WatchPut},
		{"a renew", func(h *hub) bool { return h.put(sb(true, dl.Add(time.Hour), 5)) }, nodeapi.WatchPut},
		{"an unknown sandbox leaves", func(h *hub) bool { return h.del("sb_2") }, ""},
		{"the sandbox leaves", func(h *hub) bool { return h.del("sb_1") }, nodeapi.WatchDelete},
		{"it leaves twice", func(h *hub) bool { return h.del("sb_1") }, ""},
		{"an unlisted pool stays unlisted", func(h *hub) bool { return h.setPool(row(0, 0)) }, ""},
		{"a pool gets a target", func(h *hub) bool { return h.setPool(row(0, 3)) }, nodeapi.WatchPool},
		{"the same row again", func(h *hub) bool { return h.setPool(row(0, 3)) }, ""},
		{"a warm VM booted", func(h *hub) bool { return h.setPool(row(1, 3)) }, nodeapi.WatchPool},
		{"refilling is not published", func(h *hub) bool { p := row(1, 3); p.Refilling = 2; return h.setPool(p) }, ""},
		{"the pool drains", func(h *hub) bool { return h.setPool(row(0, 0)) }, nodeapi.WatchPool},
	}
	h := newHub()
	var nilHub *hub
	for _, s := range steps {
		if nilHub != nil || s.do(nilHub) {
			t.Fatalf("%s: a nil hub published", s.name)
		}
		h.mu.Lock()
		before := h.rev
		h.mu.Unlock()
		if got := s.do(h); got != (s.want != "") {
			t.Fatalf("%s: appended %v, want %v", s.name, got, s.want != "")
		}
		h.mu.Lock()
		evs, rev, _ := h.since(nodeapi.WatchPosition{Epoch: h.epoch, Rev: before}, "n1", "")
		h.mu.Unlock()
		switch {
		case s.want == "" && (len(evs) != 0 || rev != before):
			t.Fatalf("%s: want no event, got %+v", s.name, evs)
		case s.want != "" && (len(evs) != 1 || evs[0].Type != s.want || evs[0].Rev != before+1 || rev != before+1):
			t.Fatalf("%s: want one %s at %d, got %+v", s.name, s.want, before+1, evs)
		}
		switch s.name {
		case "the sandbox leaves":
			if !evs[0].Sandbox.Paused || !evs[0].Sandbox.Deadline.Equal(dl.Add(time.Hour)) {
				t.Fatalf("a DELETE carries the last published record: %+v", evs[0].Sandbox)
			}
		case "the pool drains":
			if p := evs[0].Pool; p.Warm != 0 || p.Target != 0 || p.Template != "img" {
				t.Fatalf("a drained pool's row: %+v", p)
			}
		}
	}
}

// TestHub_WakesWaitersAndSnapshotsItsState: a stream waiting at the head
// is woken by the next event and not before; a SNAPSHOT is the hub's
// state at its revision, sorted.
func TestHub_WakesWaitersAndSnapshotsItsState(t *testing.T) {
	h := newHub()
	h.put(&nodeapi.Sandbox{ID: "sb_b", Template: "img"})
	h.put(&nodeapi.Sandbox{ID: "sb_a", Template: "img"})
	h.setPool(nodeapi.PoolInfo{Template: "img", Net: "none", Size: "small", Target: 2})
	h.mu.Lock()
	evs, rev, next := h.since(nodeapi.WatchPosition{Epoch: h.epoch, Rev: 3}, "n1", "10.0.0.1:7070")
	h.mu.Unlock()
	if len(evs) != 0 || rev != 3 {
		t.Fatalf("at the head: %d events, rev %d", len(evs), rev)
	}
	if h.put(&nodeapi.Sandbox{ID: "sb_a", Template: "img"}) {
		t.Fatal("an unchanged sandbox appended an event")
	}
	select {
	case <-next:
		t.Fatal("woken without an event")
	default:
	}
	h.del("sb_b")
	select {
	case <-next:
	default:
		t.Fatal("an event did not wake the waiting stream")
	}
	h.mu.Lock()
	snap, rev, _ := h.since(nodeapi.WatchPosition{}, "n1", "10.0.0.1:7070")
	h.mu.Unlock()
	st := snap[0].Snapshot
	if snap[0].Type != nodeapi.WatchSnapshot || snap[0].Rev != 4 || rev != 4 || st.Node != "n1" || st.NodeAddr != "10.0.0.1:7070" ||
		len(st.Sandboxes) != 1 || st.Sandboxes[0].ID != "sb_a" || len(st.Pools) != 1 || st.Pools[0].Target != 2 {
		t.Fatalf("snapshot: %+v rev %d, state %+v", snap[0], rev, st)
	}
}

// TestHub_StoppedWakesOnlyItsOwnSandboxsStop: the channel a log follow
// waits on closes when its sandbox is published paused or leaves (also
// through the consistency check), not at another sandbox's change nor at
// a change of its own that leaves it running; after a stop, a new wait
// gets a new channel.
func TestHub_StoppedWakesOnlyItsOwnSandboxsStop(t *testing.T) {
	h := newHub()
	wait := func(id string) <-chan struct{} {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.stopped(id)
	}
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	h.put(&nodeapi.Sandbox{ID: "sb_a", Template: "img"})
	h.put(&nodeapi.Sandbox{ID: "sb_b", Template: "img"})
	a, a2, b := wait("sb_a"), wait("sb_a"), wait("sb_b")
	if a != a2 {
		t.Fatal("two waits on one sandbox got two channels")
	}
	h.put(&nodeapi.Sandbox{ID: "sb_b", Template: "img", Metadata: map[string]string{"k": "v"}})
	h.put(&nodeapi.Sandbox{ID: "sb_c", Template: "img", Paused: true})
	h.del("sb_d")
	if closed(a) || closed(b) {
		t.Fatal("a change that stopped neither sandbox woke a waiter")
	}
	h.put(&nodeapi.Sandbox{ID: "sb_a", Template: "img", Paused: true})
	if !closed(a) || closed(b) {
		t.Fatalf("sb_a paused: its waiter woken %v, sb_b's %v", closed(a), closed(b))
	}
	h.del("sb_b")
	if !closed(b) {
		t.Fatal("sb_b released: its waiter was not woken")
	}
	h.put(&nodeapi.Sandbox{ID: "sb_a", Template: "img"}) // resumed
	again := wait("sb_a")
	if closed(again) {
		t.Fatal("a wait after the stop got the closed channel")
	}
	h.apply(nil, nil) // the consistency check finds sb_a gone
	if !closed(again) {
		t.Fatal("a sandbox the consistency check removed did not wake its waiter")
	}
	if len(h.stops) != 0 {
		t.Fatalf("stops left after every stop: %v", h.stops)
	}
}

// TestHub_CheckRepairsOnlyWhatWasMissed is the consistency check's core:
// a whole read equal to the hub's state appends nothing; each difference
// appends the one event that was missed.
func TestHub_CheckRepairsOnlyWhatWasMissed(t *testing.T) {
	s := func(id string, paused bool) *nodeapi.Sandbox {
		return &nodeapi.Sandbox{ID: id, Template: "img", Paused: paused}
	}
	pA := nodeapi.PoolInfo{Template: "a", Net: "none", Size: "small", Warm: 1, Target: 1}
	pB := nodeapi.PoolInfo{Template: "b", Net: "none", Size: "small", Warm: 2, Target: 2}
	h := newHub()
	if d := h.apply([]*nodeapi.Sandbox{s("sb_1", false), s("sb_2", false), s("sb_3", false)}, []nodeapi.PoolInfo{pA, pB}); d != 5 {
		t.Fatalf("first read: %d events, want 5", d)
	}
	if d := h.apply([]*nodeapi.Sandbox{s("sb_3", false), s("sb_1", false), s("sb_2", false)}, []nodeapi.PoolInfo{pB, pA}); d != 0 {
		t.Fatalf("the same state: %d events", d)
	}
	before := h.rev
	// sb_1 changed, sb_2 left, sb_4 appeared, pool b is gone, pool a is
	// unlisted (target and warm 0) and still in the table.
	pA0 := pA
	pA0.Warm, pA0.Target = 0, 0
	if d := h.apply([]*nodeapi.Sandbox{s("sb_1", true), s("sb_3", false), s("sb_4", false)}, []nodeapi.PoolInfo{pA0}); d != 5 {
		t.Fatalf("repairs: %d events, want 5", d)
	}
	h.mu.Lock()
	evs, _, _ := h.since(nodeapi.WatchPosition{Epoch: h.epoch, Rev: before}, "n1", "")
	h.mu.Unlock()
	got := map[string]int{}
	for _, ev := range evs {
		switch ev.Type {
		case nodeapi.WatchPut, nodeapi.WatchDelete:
			got[string(ev.Type)+" "+ev.Sandbox.ID]++
		case nodeapi.WatchPool:
			got[fmt.Sprintf("POOL %s %d/%d", ev.Pool.Template, ev.Pool.Warm, ev.Pool.Target)]++
		}
	}
	want := map[string]int{"PUT sb_1": 1, "DELETE sb_2": 1, "PUT sb_4": 1, "POOL a 0/0": 1, "POOL b 0/0": 1}
	if !maps.Equal(got, want) {
		t.Fatalf("repair events %v, want %v", got, want)
	}
}

// TestWatch_EveryMutationIsPublishedAtOnce drives every kind of change a
// node makes — pool target, boots, claim, pause, resume, renew, labels,
// fork, snapshot claim, release, drain — and requires that a watcher
// following the stream ends with exactly the node's state, and that the
// consistency check finds nothing to repair: each mutation published its
// own event, none was left for a rescan.
func TestWatch_EveryMutationIsPublishedAtOnce(t *testing.T) {
	tn := startNode(t, newFakeDriver(), nil)
	ch, _ := collect(t, tn.root, nodeapi.WatchPosition{})
	if _, err := tn.root.PutPools(bg, pools("img", 3)); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 3)
	a, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/a"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/b"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tn.root.Pause(bg, a.ID); err != nil {
		t.Fatal(err)
	}
	if err := tn.root.Resume(bg, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := tn.root.Renew(bg, a.ID, 7200); err != nil {
		t.Fatal(err)
	}
	if _, err := tn.root.SetLabels(bg, a.ID, nodeapi.LabelsRequest{Labels: map[string]string{"team": "x"}}); err != nil {
		t.Fatal(err)
	}
	kids, err := tn.root.Fork(bg, b.ID, nodeapi.ForkRequest{Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := tn.root.Snapshot(bg, b.ID, "snap")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tn.root.ClaimSnapshotAs(bg, snap.ID, nodeapi.SnapshotClaimRequest{ClaimRef: "ns/from-snap"}); err != nil {
		t.Fatal(err)
	}
	if err := tn.root.Release(bg, kids[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := tn.root.PutPools(bg, nil); err != nil { // drain
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		info, err := tn.root.Info(bg)
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Pools) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool never drained: %+v", info.Pools)
		}
	}

	// The node's state, read from the table and the hub at one instant.
	tn.mu.Lock()
	want := map[string]nodeapi.Sandbox{}
	for id, sb := range tn.tab.byID {
		want[id] = *streamed(&sb.rec, tn.cfg.Name, tn.cfg.AdvertiseAddress)
	}
	tn.hub.mu.Lock()
	head := tn.hub.rev
	tn.hub.mu.Unlock()
	tn.mu.Unlock()

	// The watcher's state, built from the SNAPSHOT and every event since.
	got := map[string]nodeapi.Sandbox{}
	var at uint64
	for at < head {
		ev := <-ch
		switch ev.Type {
		case nodeapi.WatchSnapshot:
			clear(got)
			for _, s := range ev.Snapshot.Sandboxes {
				got[s.ID] = s
			}
		case nodeapi.WatchPut:
			got[ev.Sandbox.ID] = *ev.Sandbox
		case nodeapi.WatchDelete:
			delete(got, ev.Sandbox.ID)
		}
		if ev.Type != nodeapi.WatchKeepalive {
			if ev.Type != nodeapi.WatchSnapshot && ev.Rev != at+1 {
				t.Fatalf("event %d after %d", ev.Rev, at)
			}
			at = ev.Rev
		}
	}
	if len(got) != len(want) || len(want) != 4 {
		t.Fatalf("watcher holds %d sandboxes, the node %d (want 4)", len(got), len(want))
	}
	for id, w := range want {
		g, ok := got[id]
		if !ok || !samePublished(&g, &w) {
			t.Fatalf("sandbox %s: watcher %+v, node %+v", id, g, w)
		}
	}
	if g := got[a.ID]; g.Labels["team"] != "x" || g.Paused {
		t.Fatalf("the labelled, resumed sandbox: %+v", g)
	}
	if d := tn.checkHub(); d != 0 {
		t.Fatalf("the consistency check repaired %d missed changes", d)
	}
}

// TestWatch_CheckRepairsAndCountsAChangeThatBypassedTheTable: a record
// changed behind the table's back reaches the stream at the next
// consistency check, which counts it in hearth_node_watch_drift_total.
func TestWatch_CheckRepairsAndCountsAChangeThatBypassedTheTable(t *testing.T) {
	tn := startNode(t, newFakeDriver(), nil)
	if _, err := tn.root.PutPools(bg, pools("img", 1)); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 1)
	a, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/a"})
	if err != nil {
		t.Fatal(err)
	}
	ch, _ := collect(t, tn.root, nodeapi.WatchPosition{})
	if ev := next(t, ch); ev.Type != nodeapi.WatchSnapshot {
		t.Fatalf("first event: %+v", ev)
	}
	tn.mu.Lock()
	tn.tab.byID[a.ID].rec.Paused = true // not through the table
	tn.mu.Unlock()
	if d := tn.checkHub(); d != 1 {
		t.Fatalf("the check repaired %d changes, want 1", d)
	}
	if ev := next(t, ch); ev.Type != nodeapi.WatchPut || ev.Sandbox.ID != a.ID || !ev.Sandbox.Paused {
		t.Fatalf("repaired event: %+v", ev)
	}
	if v := testutil.ToFloat64(tn.metrics.watchDrift); v != 1 {
		t.Fatalf("hearth_node_watch_drift_total = %v, want 1", v)
	}
	if d := tn.checkHub(); d != 0 {
		t.Fatalf("a second check repaired %d", d)
	}
}

// The change stream carries a claim's metadata and labels (what every
// replica's list filters read), in its PUT and, after a kill -9 and a
// restart on the same data dir, in the new epoch's SNAPSHOT; never its
// token, spec or managed fields (a lookup returns those). The published
// NodeInventory carries no metadata.
func TestWatch_MetadataAndLabelsOnTheStreamAcrossACrash(t *testing.T) {
	drv := newFakeDriver()
	cfg := Config{Name: "n1", DataDir: t.TempDir(), Driver: drv, RootToken: testRoot, ReapInterval: 50 * time.Millisecond, RefillInterval: 50 * time.Millisecond}
	a := runNode(t, cfg)
	if _, err := a.root.PutPools(bg, pools("img", 1)); err != nil {
		t.Fatal(err)
	}
	a.waitWarm(t, "img", 1)
	ch, stop := collect(t, a.root, nodeapi.WatchPosition{})
	next(t, ch) // the SNAPSHOT
	md := map[string]string{"bar": "x"}
	obj := nodeapi.Object{Labels: map[string]string{"team": "a"}, Spec: []byte(`{"k":1}`), ManagedFields: []byte(`[{"manager":"me"}]`)}
	s, err := a.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/md", Metadata: md, Object: obj})
	if err != nil {
		t.Fatal(err)
	}
	streamedOK := func(step string, got *nodeapi.Sandbox) {
		t.Helper()
		if got.ID != s.ID || !maps.Equal(got.Metadata, md) || !maps.Equal(got.Labels, obj.Labels) {
			t.Errorf("%s: %+v; want %s with metadata %v and labels %v", step, got, s.ID, md, obj.Labels)
		}
		if got.Token != "" || got.Spec != nil || got.ManagedFields != nil {
			t.Errorf("%s: the stream carries a token, spec or managed fields: %+v", step, got)
		}
	}
	put := next(t, ch)
	if put.Type != nodeapi.WatchPut {
		t.Fatalf("after claim: %+v", put)
	}
	streamedOK("PUT", put.Sandbox)
	stop()
	if inv := a.Inventory(); len(inv.Entries) != 1 || inv.Entries[0].Metadata != nil || inv.Entries[0].Labels["team"] != "a" {
		t.Fatalf("published entries %+v; want one with its labels and no metadata", inv.Entries)
	}
	a.crash()

	b := runNode(t, cfg)
	ch, _ = collect(t, b.root, nodeapi.WatchPosition{Epoch: put.Epoch, Rev: put.Rev})
	snap := next(t, ch)
	if snap.Type != nodeapi.WatchSnapshot || snap.Epoch == put.Epoch || len(snap.Snapshot.Sandboxes) != 1 {
		t.Fatalf("after the restart: %+v", snap)
	}
	streamedOK("SNAPSHOT after the restart", &snap.Snapshot.Sandboxes[0])
	if got, err := b.root.Get(bg, s.ID); err != nil || string(got.Spec) != string(obj.Spec) ||
		string(got.ManagedFields) != string(obj.ManagedFields) || !maps.Equal(got.Metadata, md) {
		t.Fatalf("lookup after the restart: %+v, %v; want what the claim stored", got, err)
	}
}
