package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
)

// The regression guards of the node's per-operation cost: a claim, a
// pause plus resume and a release, each until a subscriber of the node's
// change stream has seen it (as the API servers always do), must cost the
// same CPU whatever the node holds (the change stream once rescanned the
// whole table on every change, making each claim O(VMs held)). They
// measure process CPU time
// (user + system, getrusage), not wall time, at two node sizes in one
// run, interleaving the two nodes' batches so that whatever else the
// machine does falls on both, take each node's cheapest batch, and require
// a ratio of at most 2.

const (
	scaleSmall = 100   // VMs held by the small node (warm plus claimed)
	scaleLarge = 5_000 // by the large one
	scaleBatch = 40    // operations per measured batch (at most the small node's warm VMs)
	scaleRound = 20    // batches per node
	// scaleMaxRatio bounds large/small: a cost linear in the VMs held
	// would be ~50×; noise stays far below 2×.
	scaleMaxRatio = 2.0
)

var scaleKey = pool.Key{Template: "img", Net: "none", Size: "small"}

// processCPU is the process's user+system CPU time so far.
func processCPU(t testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// scaleNode is a running node (fake driver, fsync off: the store's cost
// does not depend on the node's size and would only add noise) holding
// held VMs: held/2 claimed, held/2 warm with the refill loop keeping them.
type scaleNode struct {
	*testNode
	h    http.Handler
	refs int
	evs  <-chan nodeapi.WatchEvent // the node's change stream, from a SNAPSHOT
}

func newScaleNode(t *testing.T, held int) *scaleNode {
	t.Helper()
	tn := startNode(t, newFakeDriver(), func(c *Config) {
		c.StoreNoSync = true
		c.ReapInterval, c.RefillInterval = time.Second, time.Second
	})
	sn := &scaleNode{testNode: tn, h: tn.Handler()}
	warm := int32(held / 2)
	if _, err := tn.root.PutPools(bg, pools("img", warm)); err != nil {
		t.Fatal(err)
	}
	sn.settle(t)
	for range held - int(warm) {
		if _, err := tn.claim(bg, claimInput{key: scaleKey, ref: sn.nextRef()}); err != nil {
			t.Fatal(err)
		}
	}
	sn.settle(t)
	sn.evs, _ = collect(t, tn.root, nodeapi.WatchPosition{})
	sn.await(t, nodeapi.WatchSnapshot, "", false)
	return sn
}

// await reads the change stream up to the event of type typ about
// sandbox id (paused as given, for a PUT).
func (sn *scaleNode) await(t *testing.T, typ nodeapi.WatchEventType, id string, paused bool) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-sn.evs:
			if ev.Type != typ {
				continue
			}
			if typ == nodeapi.WatchSnapshot || ev.Sandbox.ID == id && (typ != nodeapi.WatchPut || ev.Sandbox.Paused == paused) {
				return
			}
		case <-timeout:
			t.Fatalf("the change stream did not carry %s %s within 10s", typ, id)
		}
	}
}

func (sn *scaleNode) nextRef() string {
	sn.refs++
	return fmt.Sprintf("ns/s-%d", sn.refs)
}

// settle waits until the refill loop has made the pool whole again, so a
// batch's measure includes the boots it caused.
func (sn *scaleNode) settle(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(time.Millisecond) {
		sn.mu.Lock()
		p := sn.tab.pools[scaleKey]
		done := p != nil && len(p.warm) == int(p.target) && p.booting == 0
		sn.mu.Unlock()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the warm pool was not refilled within 60s")
		}
	}
}

// call serves one request with the node's handler, in process.
func (sn *scaleNode) call(t *testing.T, method, path string, body any, want int) []byte {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req := httptest.NewRequestWithContext(context.Background(), method, path, rd)
	req.Header.Set("Authorization", "Bearer "+testRoot)
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	sn.h.ServeHTTP(rec, req)
	if rec.Code != want {
		t.Fatalf("%s %s answered %d: %s", method, path, rec.Code, rec.Body.String())
	}
	return rec.Body.Bytes()
}

// claimBatch claims scaleBatch sandboxes through the handler, each until
// the change stream has carried it (the refill loop then boots their
// replacements), and returns their ids.
func (sn *scaleNode) claimBatch(t *testing.T) []string {
	ids := make([]string, scaleBatch)
	for i := range ids {
		var s nodeapi.Sandbox
		b := sn.call(t, http.MethodPost, "/v1/claim", nodeapi.ClaimRequest{Template: "img", ClaimRef: sn.nextRef()}, http.StatusOK)
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		ids[i] = s.ID
		sn.await(t, nodeapi.WatchPut, s.ID, false)
	}
	sn.settle(t)
	return ids
}

func (sn *scaleNode) releaseAll(t *testing.T, ids []string) {
	for _, id := range ids {
		sn.call(t, http.MethodPost, "/v1/sandboxes/"+id+"/release", nil, http.StatusNoContent)
		sn.await(t, nodeapi.WatchDelete, id, false)
	}
}

func (sn *scaleNode) pauseResumeAll(t *testing.T, ids []string) {
	for _, id := range ids {
		sn.call(t, http.MethodPost, "/v1/sandboxes/"+id+"/pause", nil, http.StatusNoContent)
		sn.await(t, nodeapi.WatchPut, id, true)
		sn.call(t, http.MethodPost, "/v1/sandboxes/"+id+"/resume", nil, http.StatusNoContent)
		sn.await(t, nodeapi.WatchPut, id, false)
	}
}

// measured runs f and returns the process CPU it took. A GC first makes
// a cycle during f unlikely: when one falls in a batch is chance.
func measured(t *testing.T, f func()) time.Duration {
	runtime.GC()
	c0 := processCPU(t)
	f()
	return processCPU(t) - c0
}

// compareScale runs rounds of op on both nodes, alternating, and fails
// when the large node's CPU per operation is over scaleMaxRatio times the
// small one's. op returns the CPU of its measured batch. Each node's
// figure is its cheapest batch: what else the machine does (other
// processes on a shared CPU, a GC cycle) only ever adds CPU to a batch.
func compareScale(t *testing.T, what string, op func(sn *scaleNode) time.Duration) {
	small, large := newScaleNode(t, scaleSmall), newScaleNode(t, scaleLarge)
	cs, cl := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
	for range scaleRound {
		cs = min(cs, op(small))
		cl = min(cl, op(large))
	}
	ratio := float64(cl) / float64(cs)
	cs, cl = cs/scaleBatch, cl/scaleBatch
	t.Logf("%s: %v CPU at %d VMs held, %v at %d (×%.2f)", what, cs, scaleSmall, cl, scaleLarge, ratio)
	if ratio > scaleMaxRatio {
		t.Errorf("%s costs %v of CPU on a node holding %d VMs and %v on one holding %d: ×%.1f, over ×%.0f (a cost that grows with the node)",
			what, cs, scaleSmall, cl, scaleLarge, ratio, scaleMaxRatio)
	}
}

func TestScale_ClaimCPUDoesNotGrowWithVMsHeld(t *testing.T) {
	compareScale(t, "a claim (with its refill boot)", func(sn *scaleNode) time.Duration {
		var ids []string
		cpu := measured(t, func() { ids = sn.claimBatch(t) })
		sn.releaseAll(t, ids) // the node keeps its size
		return cpu
	})
}

func TestScale_PauseResumeAndReleaseCPUDoNotGrowWithVMsHeld(t *testing.T) {
	compareScale(t, "a pause and a resume", func(sn *scaleNode) time.Duration {
		ids := sn.claimBatch(t)
		cpu := measured(t, func() { sn.pauseResumeAll(t, ids) })
		sn.releaseAll(t, ids)
		return cpu
	})
	compareScale(t, "a release", func(sn *scaleNode) time.Duration {
		ids := sn.claimBatch(t)
		return measured(t, func() { sn.releaseAll(t, ids) })
	})
}
