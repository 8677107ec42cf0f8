package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hearthvm/hearth/agent"
	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/vmm/vmmtest"
)

// followCount is the count of follows the node serves now.
func (f *logFollows) followCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.total
}

// nextMessage reads st until an entry whose message is want.
func nextMessage(t *testing.T, st *agentapi.LogStream, want string) {
	t.Helper()
	for {
		e, err := st.Next()
		if err != nil {
			t.Fatalf("waiting for %q: %v", want, err)
		}
		if e.Message == want {
			return
		}
	}
}

// GET /v1/sandboxes/{id}/logs?follow=true streams the agent's log over
// HTTP: an entry written after the follow started arrives; past the
// sandbox's bound a follow is a 429; a pause ends every follow of the
// sandbox (the node ends them: the fake driver's pause leaves the agent
// running), and a paused sandbox's log cannot be followed (409).
func TestLogs_FollowStreamsOverHTTPUntilThePause(t *testing.T) {
	srv := httptest.NewServer(agent.NewHandler(agent.Options{Root: t.TempDir()}))
	t.Cleanup(srv.Close)
	drv := vmmtest.New(vmmtest.Options{Name: "fake", Addr: srv.Listener.Addr().String()})
	tn := startNode(t, drv, nil)
	if _, err := tn.root.PutPools(bg, pools("img", 1)); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 1)
	a, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/a"})
	if err != nil {
		t.Fatal(err)
	}
	runInAgent(t, srv.URL, "echo before")
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	st, err := tn.root.FollowLogs(ctx, a.ID, agentapi.LogsQuery{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	nextMessage(t, st, "before")
	runInAgent(t, srv.URL, "echo after")
	nextMessage(t, st, "after")

	var more []*agentapi.LogStream
	for range maxLogFollowsPerSandbox - 1 {
		s, err := tn.root.FollowLogs(ctx, a.ID, agentapi.LogsQuery{Tail: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		more = append(more, s)
	}
	if _, err := tn.root.FollowLogs(ctx, a.ID, agentapi.LogsQuery{}); nodeapi.StatusOf(err) != http.StatusTooManyRequests {
		t.Fatalf("past the bound: %v, want 429", err)
	}

	if err := tn.root.Pause(bg, a.ID); err != nil {
		t.Fatal(err)
	}
	for _, s := range append(more, st) {
		for {
			_, err := s.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("a follow ended by the pause: %v, want its end", err)
			}
		}
	}
	if _, err := tn.root.FollowLogs(ctx, a.ID, agentapi.LogsQuery{}); nodeapi.StatusOf(err) != http.StatusConflict {
		t.Fatalf("paused: %v, want 409", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for tn.follows.followCount() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d follows still counted", tn.follows.followCount())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestLogFollows_BoundsPerSandboxPerNamespaceAndNode: the node's follow
// admission — past a sandbox's bound its next follow is a 429, past a
// namespace's bound every follow of that namespace's sandboxes is (so a
// reader of one namespace, following each of its many sandboxes, cannot
// take the node's every follow), another namespace's still pass, and past
// the node's bound nothing does; a follow that ends frees its place.
func TestLogFollows_BoundsPerSandboxPerNamespaceAndNode(t *testing.T) {
	var f logFollows
	status := statusOf
	for range maxLogFollowsPerSandbox {
		if err := f.admit("sb_a", "team-a"); err != nil {
			t.Fatal(err)
		}
	}
	if got := status(f.admit("sb_a", "team-a")); got != http.StatusTooManyRequests {
		t.Fatalf("past the sandbox's bound: %d, want 429", got)
	}
	for i := maxLogFollowsPerSandbox; i < maxLogFollowsPerNamespace; i++ {
		if err := f.admit(fmt.Sprintf("sb_a%d", i), "team-a"); err != nil {
			t.Fatalf("follow %d of team-a: %v", i, err)
		}
	}
	if got := status(f.admit("sb_new", "team-a")); got != http.StatusTooManyRequests {
		t.Fatalf("past the namespace's bound: %d, want 429", got)
	}
	for i := maxLogFollowsPerNamespace; i < maxLogFollows; i++ {
		ns := fmt.Sprintf("team-%d", i/maxLogFollowsPerNamespace)
		if err := f.admit(fmt.Sprintf("sb_%d", i), ns); err != nil {
			t.Fatalf("follow %d of %s: %v", i, ns, err)
		}
	}
	if got := status(f.admit("sb_z", "team-z")); got != http.StatusTooManyRequests {
		t.Fatalf("past the node's bound: %d, want 429", got)
	}
	f.leave("sb_a", "team-a")
	if err := f.admit("sb_new", "team-a"); err != nil {
		t.Fatalf("a follow that ended did not free its place: %v", err)
	}
	if f.followCount() != maxLogFollows {
		t.Fatalf("%d follows counted, want %d", f.followCount(), maxLogFollows)
	}
}
