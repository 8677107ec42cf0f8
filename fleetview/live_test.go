package fleetview

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2/ktesting"

	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/node"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/vmm/vmmtest"
)

const (
	token  = "root"
	secret = "fleet-secret"
)

// liveNode is a real node (fake VMM) served on a fixed loopback address,
// so it can be stopped and started again at the same address.
type liveNode struct {
	t      testing.TB
	name   string
	addr   string
	dir    string
	drv    *vmmtest.Driver
	n      *node.Node
	srv    *http.Server
	cancel context.CancelFunc
	done   chan struct{}
	client *nodeapi.Client
}

func startLiveNode(t testing.TB, name string) *liveNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	x := &liveNode{t: t, name: name, addr: addr, dir: t.TempDir(), drv: vmmtest.New(vmmtest.Options{Name: "fake"})}
	x.start()
	t.Cleanup(x.stop)
	return x
}

func (x *liveNode) start() {
	x.t.Helper()
	n, err := node.New(node.Config{Name: x.name, AdvertiseAddress: x.addr, RootToken: token, NodeToken: nodeapi.NodeToken(secret, x.name), DataDir: x.dir, Driver: x.drv,
		Logger: ktesting.NewLogger(x.t, ktesting.NewConfig()), WarmCheckInterval: -1,
		ReapInterval: 50 * time.Millisecond, RefillInterval: 50 * time.Millisecond})
	if err != nil {
		x.t.Fatal(err)
	}
	var ln net.Listener
	for i := 0; ; i++ { // the address may linger briefly after a stop
		if ln, err = net.Listen("tcp", x.addr); err == nil {
			break
		}
		if i > 100 {
			x.t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	x.n = n
	x.srv = &http.Server{Handler: n.Handler()}
	go func() { _ = x.srv.Serve(ln) }()
	ctx, cancel := context.WithCancel(context.Background())
	x.cancel, x.done = cancel, make(chan struct{})
	go func() { defer close(x.done); _ = n.Run(ctx) }()
	x.client = nodeapi.NewClient(x.addr, token)
}

func (x *liveNode) stop() {
	if x.n == nil {
		return
	}
	_ = x.srv.Close()
	x.cancel()
	<-x.done
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = x.n.Close(ctx)
	x.n = nil
}

func (x *liveNode) fill(t testing.TB, warm int32) {
	t.Helper()
	if _, err := x.client.PutPools(context.Background(), []nodeapi.PoolSpec{{Template: "img", Warm: warm}}); err != nil {
		t.Fatal(err)
	}
	require.Eventually(t, func() bool {
		info, err := x.client.Info(context.Background())
		return err == nil && len(info.Pools) == 1 && info.Pools[0].Warm == warm
	}, 10*time.Second, 5*time.Millisecond)
}

func runLive(t testing.TB, pub Published) *Live {
	t.Helper()
	l := New(pub, Config{Secret: secret, Idle: 2 * time.Second, Retry: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := l.WaitForSync(wctx); err != nil {
		t.Fatal(err)
	}
	return l
}

func byName(l *Live, name string) (inventory.Versioned, bool) {
	items, _ := l.List(func(it inventory.Item) bool { return it.Entry.Name == name })
	if len(items) == 0 {
		return inventory.Versioned{}, false
	}
	return items[0], true
}

// A claim made directly on a node's API reaches the view (and a waiting
// watcher) well within a second; so does its release; warm counts follow.
func TestLive_DirectClaimAndReleaseVisibleWithinASecond(t *testing.T) {
	a := startLiveNode(t, "n1")
	a.fill(t, 2)
	l := runLive(t, inventory.NewStatic(a.n.Inventory()))
	if st := l.Nodes(); len(st) != 1 || !st[0].Live {
		t.Fatalf("after sync: %+v", st)
	}
	_, _, wake, _ := l.Since(l.Rev(), 0)
	start := time.Now()
	s, err := a.client.Claim(context.Background(), nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/direct"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-time.After(10 * time.Second): // how soon is measured (the log, bench/), not asserted
		t.Fatal("no change within 10s of a direct claim")
	}
	it, ok := byName(l, "ns/direct")
	if !ok || it.Entry.ID != s.ID {
		t.Fatalf("claim not in the view: %+v", it)
	}
	t.Logf("claim visible after %v", time.Since(start))
	require.Eventually(t, func() bool {
		n, _ := l.View().Node("n1")
		return len(n.Pools) == 1 && n.Pools[0].Warm <= 2
	}, 10*time.Second, 5*time.Millisecond)
	start = time.Now()
	if err := a.client.Release(context.Background(), s.ID); err != nil {
		t.Fatal(err)
	}
	require.Eventually(t, func() bool { _, ok := byName(l, "ns/direct"); return !ok }, 10*time.Second, 5*time.Millisecond)
	t.Logf("release visible after %v", time.Since(start))
}

func TestLive_StreamDownFallsBackToPublishedAndIsFlagged(t *testing.T) {
	a := startLiveNode(t, "n1")
	a.fill(t, 2)
	pub := inventory.NewStatic(a.n.Inventory())
	l := runLive(t, pub)
	if _, err := a.client.Claim(context.Background(), nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/live"}); err != nil {
		t.Fatal(err)
	}
	require.Eventually(t, func() bool { _, ok := byName(l, "ns/live"); return ok }, 10*time.Second, 5*time.Millisecond)
	inv := a.n.Inventory() // what the node would publish now
	a.stop()
	require.Eventually(t, func() bool { return l.Degraded() == 1 }, 10*time.Second, 5*time.Millisecond)
	if st := l.Nodes(); st[0].Live || st[0].Since.IsZero() {
		t.Fatalf("flag: %+v", st)
	}
	// The last publish: the view serves it for the down node.
	inv.Entries = append(inv.Entries, inventory.Entry{Name: "ns/published-only", ID: "sb_pub", Phase: "Running"})
	pub.Set(inv)
	require.Eventually(t, func() bool { _, ok := byName(l, "ns/published-only"); return ok }, 10*time.Second, 5*time.Millisecond)
	if _, ok := byName(l, "ns/live"); !ok {
		t.Fatal("the published object's entries replaced the node's")
	}
}

func TestLive_NodeRestartResyncsWithoutDuplicatesOrLosses(t *testing.T) {
	a := startLiveNode(t, "n1")
	a.fill(t, 3)
	l := runLive(t, inventory.NewStatic(a.n.Inventory()))
	ctx := context.Background()
	keep, err := a.client.Claim(ctx, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/keep", TTLSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	gone, err := a.client.Claim(ctx, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/gone", TTLSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	require.Eventually(t, func() bool { _, ok := byName(l, "ns/gone"); return ok }, 10*time.Second, 5*time.Millisecond)
	epoch := l.Nodes()[0].Position.Epoch
	rv := l.Rev()
	if err := a.client.Release(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	a.stop() // claimed VMs are stopped and restored by the next process
	a.start()
	added, err := a.client.Claim(ctx, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/new", TTLSeconds: 600})
	if err != nil {
		a.fill(t, 3)
		if added, err = a.client.Claim(ctx, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/new", TTLSeconds: 600}); err != nil {
			t.Fatal(err)
		}
	}
	require.Eventually(t, func() bool {
		st := l.Nodes()[0]
		_, ok := byName(l, "ns/new")
		return st.Live && st.Position.Epoch != epoch && ok
	}, 10*time.Second, 5*time.Millisecond)
	items, _ := l.List(nil)
	got := map[string]string{}
	for _, it := range items {
		got[it.Entry.Name] = it.Entry.ID
	}
	if len(got) != 2 || got["ns/keep"] != keep.ID || got["ns/new"] != added.ID {
		t.Fatalf("after restart: %v", got)
	}
	cs, _, _, err := l.Since(rv, 0)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, c := range cs {
		seen[string(c.Type)+" "+c.Item.Entry.Name]++
	}
	if seen["DELETED ns/gone"] != 1 || seen["ADDED ns/new"] != 1 || seen["ADDED ns/keep"] != 0 || seen["DELETED ns/keep"] != 0 {
		t.Fatalf("changes across the restart: %v", seen)
	}
}

// The router's warm counts come from the stream on every View call, with
// no publish in between; the View carries the nodes only.
func TestLive_ViewPoolsAreFreshWithoutABuild(t *testing.T) {
	l := New(inventory.NewStatic(), Config{})
	s := l.Store()
	s.SetPublished(&inventory.NodeInventory{Node: "n1", Address: "a:1", Pools: []inventory.Pool{{Template: "img", Warm: 0, Target: 3}}}, t0)
	if n, ok := l.View().Node("n1"); !ok || len(n.Pools) != 1 || n.Pools[0].Warm != 0 || n.Address != "a:1" {
		t.Fatalf("pools as published: %+v", n)
	}
	if err := s.Apply("n1", snapshot("e", 1, sb("sb_1", "ns/1")), t0); err != nil { // warm 2
		t.Fatal(err)
	}
	n, ok := l.View().Node("n1")
	if !ok || len(n.Pools) != 1 || n.Pools[0].Warm != 2 {
		t.Fatalf("pools after the SNAPSHOT: %+v", n)
	}
	if v := l.View(); v.Len() != 0 {
		t.Fatalf("the nodes' View carries %d entries; sandboxes are read from the store", v.Len())
	}
	if err := s.Apply("n1", nodeapi.WatchEvent{Type: nodeapi.WatchPool, Epoch: "e", Rev: 2, Pool: &nodeapi.PoolInfo{Template: "img", Warm: 1, Target: 3}}, t0); err != nil {
		t.Fatal(err)
	}
	if n, _ := l.View().Node("n1"); n.Pools[0].Warm != 1 {
		t.Fatalf("pools after a POOL event: %+v", n.Pools)
	}
}
