package e2b

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/fleet"
)

// A not-found is served from memory for the miss TTL — a burst of
// lookups for an unknown id costs the nodes one — and asked again once
// the TTL has passed.
func TestLookup_MissIsCachedUntilItsTTLEnds(t *testing.T) {
	g, f, _ := cacheGatewayFleet(t, 1)
	const ttl = 300 * time.Millisecond
	g.misses = newMissCache(cacheSize, ttl)
	ctx := context.Background()
	_, err := g.lookup(ctx, "i-nobody")
	require.ErrorIs(t, err, fleet.ErrNotFound)
	asked := f.lookupCount()
	require.Positive(t, asked)
	for range 10 {
		_, err := g.lookup(ctx, "i-nobody")
		require.ErrorIs(t, err, fleet.ErrNotFound)
	}
	require.Equal(t, asked, f.lookupCount(), "a cached not-found reached the fleet")
	require.Eventually(t, func() bool { return !g.missed("i-nobody") }, 10*ttl, ttl/10, "the not-found outlived its TTL")
	_, err = g.lookup(ctx, "i-nobody")
	require.ErrorIs(t, err, fleet.ErrNotFound)
	require.Greater(t, f.lookupCount(), asked, "an expired not-found was still served from memory")
}

// The miss cache holds at most its size: an id scan of ever new ids
// evicts the least recently missed, never grows past the bound.
func TestMissCache_IsBounded(t *testing.T) {
	g, _ := cacheGateway(t)
	g.misses = newMissCache(3, time.Minute)
	for _, id := range []string{"i-1", "i-2", "i-3", "i-4"} {
		g.miss(id)
	}
	require.Equal(t, 3, g.misses.Len())
	require.False(t, g.missed("i-1"), "the least recently missed id was kept")
	require.True(t, g.missed("i-4"))
}

// The route cache holds at most its size, and a sandbox's release (its
// kill through the gateway) drops every route to it at once.
func TestRouteCache_IsBoundedAndDroppedOnRelease(t *testing.T) {
	g, f, first := cacheGatewayFleet(t, 3)
	g.routes = newRouteCache(2)
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	c := &gw{t: t, url: srv.URL, f: f}
	ids := []string{first}
	for range 2 {
		var s sandboxJSON
		resp, body := c.call("POST", "/v2/sandboxes", map[string]any{"templateID": "rt"}, &s)
		require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))
		ids = append(ids, s.SandboxID)
	}
	ctx := context.Background()
	for _, id := range ids {
		_, err := g.route(ctx, id)
		require.NoError(t, err)
	}
	require.Equal(t, 2, g.routes.Len())
	last := ids[len(ids)-1]
	_, ok := g.cachedRoute(last, time.Now())
	require.True(t, ok)
	resp, body := c.call("DELETE", "/sandboxes/"+last, nil, nil)
	require.Equal(t, http.StatusNoContent, resp.StatusCode, string(body))
	_, ok = g.cachedRoute(last, time.Now())
	require.False(t, ok, "a killed sandbox's route stayed cached")
	_, err := g.route(ctx, last)
	require.ErrorIs(t, err, fleet.ErrNotFound)
}

// cacheGateway is a gateway over the fake fleet holding one e2b sandbox,
// for the caches' tests and benchmarks: the gateway itself and that
// sandbox's id.
func cacheGateway(b testing.TB) (*gateway, string) {
	g, _, id := cacheGatewayFleet(b, 1)
	return g, id
}

// cacheGatewayFleet is cacheGateway with n warm sandboxes and its fleet.
func cacheGatewayFleet(b testing.TB, n int) (*gateway, *fakeFleet, string) {
	f := newFakeFleet(b)
	f.addWarm("rt", n)
	h, err := New(Config{Fleet: f, APIKeys: []string{apiKey}, Domain: "gw.local"})
	require.NoError(b, err)
	srv := httptest.NewServer(h)
	b.Cleanup(srv.Close)
	var s sandboxJSON
	resp, body := (&gw{t: b, url: srv.URL, f: f}).call("POST", "/v2/sandboxes", map[string]any{"templateID": "rt"}, &s)
	require.Equal(b, http.StatusCreated, resp.StatusCode, string(body))
	return h.(*gateway), f, s.SandboxID
}

// BenchmarkRoute_CachedHit: the data plane's route for a sandbox already
// in the route cache (every envd request after the first), from many
// goroutines.
func BenchmarkRoute_CachedHit(b *testing.B) {
	g, id := cacheGateway(b)
	ctx := context.Background()
	_, err := g.route(ctx, id)
	require.NoError(b, err)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := g.route(ctx, id); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkLookup_CachedMiss: a burst of requests for an id nobody holds,
// answered from the miss cache, from many goroutines.
func BenchmarkLookup_CachedMiss(b *testing.B) {
	g, _ := cacheGateway(b)
	ctx := context.Background()
	_, err := g.lookupKnown(ctx, "i-nobody")
	require.Error(b, err)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := g.lookupKnown(ctx, "i-nobody"); err == nil {
				b.Fatal("found")
			}
		}
	})
}

// BenchmarkMiss_DistinctIDs: remembering not-founds for ever new ids (a
// scan of random ids), past the cache's bound.
func BenchmarkMiss_DistinctIDs(b *testing.B) {
	g, _ := cacheGateway(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		g.miss("i-" + strconv.Itoa(i))
		i++
	}
}
