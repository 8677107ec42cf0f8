package node

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2/ktesting"

	"github.com/hearthvm/hearth/internal/serve"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/vmm/vmmtest"
)

// newServeNode is a node over an in-memory driver, not yet running.
func newServeNode(t *testing.T) (*Node, *vmmtest.Driver) {
	t.Helper()
	drv := newFakeDriver()
	n, err := New(Config{
		Name: "n1", DataDir: t.TempDir(), Driver: drv, RootToken: testRoot, Logger: ktesting.NewLogger(t, ktesting.NewConfig()),
		MaxBootConcurrency: 4, ReapInterval: 50 * time.Millisecond, RefillInterval: 20 * time.Millisecond, WarmCheckInterval: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return n, drv
}

// Serve serves the API through the budget it is given and runs the
// node's loops (the pool fills); once its context ends it stops serving
// (the listener closes), and returns nil with the node closed (its warm
// VMs destroyed).
func TestServe_ServesAndRunsUntilCanceledThenClosesTheNode(t *testing.T) {
	n, drv := newServeNode(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	budget := serve.NewBudget(serve.Limits{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() {
		served <- Serve(ctx, n, ln, ServeOptions{Serve: serve.Options{Budget: budget}, Grace: time.Second, CloseTimeout: 30 * time.Second})
	}()

	c := nodeapi.NewClient(addr, testRoot)
	if _, err := c.PutPools(context.Background(), pools("img", 2)); err != nil {
		t.Fatal(err)
	}
	require.Eventually(t, func() bool {
		info, err := c.Info(context.Background())
		return err == nil && len(info.Pools) == 1 && info.Pools[0].Warm == 2
	}, waitWithin, waitTick)
	if st := budget.Stats(); st.Open == 0 {
		t.Fatalf("the API's connections do not draw from the budget given: %+v", st)
	}

	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve after its context ended: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Fatal("the listener is still open after Serve returned")
	}
	if drv.Len() != 0 {
		t.Fatalf("%d warm VMs left after Serve returned", drv.Len())
	}
	if err := n.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("Run after Serve returned: %v, want the node closed", err)
	}
}

// A listener that fails ends Serve with its error, and the node is closed
// all the same.
func TestServe_ServingErrorIsReturnedAndTheNodeClosed(t *testing.T) {
	n, _ := newServeNode(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	served := make(chan error, 1)
	go func() {
		served <- Serve(context.Background(), n, ln, ServeOptions{Serve: serve.Options{Budget: serve.NewBudget(serve.Limits{})}})
	}()
	select {
	case err := <-served:
		if err == nil {
			t.Fatal("Serve on a closed listener returned nil")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve on a closed listener did not return")
	}
	if err := n.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("Run after Serve returned: %v, want the node closed", err)
	}
}
