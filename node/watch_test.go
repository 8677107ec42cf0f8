package node

import (
	"context"
	"errors"
	"testing"
	"time"

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
		h.apply("n1", []nodeapi.Sandbox{{ID: "sb_1", Deadline: time.Unix(int64(i), 0)}}, nil)
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
