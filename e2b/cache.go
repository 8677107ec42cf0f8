package e2b

import (
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/hashicorp/golang-lru/v2/expirable"

	"github.com/hearthvm/hearth/nodeapi"
)

// cacheSize bounds each of the gateway's caches (routes, misses): past
// it the least recently used entry goes. Entries are cheap to rebuild.
const cacheSize = 100_000

// missTTL is how long a not-found is served from memory.
const missTTL = 2 * time.Second

// missCache maps a client-supplied id to its cached not-found; an entry
// ends missTTL after it was (last) added.
type missCache = expirable.LRU[string, struct{}]

func newMissCache(size int, ttl time.Duration) *missCache {
	return expirable.NewLRU[string, struct{}](size, nil, ttl)
}

// routeCache maps a client id (or "\x00ref "+ref) to its agent route; a
// route is used until its exp (routeTTL), the LRU only bounds the cache
// (past cacheSize the least recently added route goes).
type routeCache = lru.Cache[string, route]

func newRouteCache(size int) *routeCache {
	c, err := lru.New[string, route](size)
	if err != nil {
		panic(err) // only for size <= 0
	}
	return c
}

func (g *gateway) missed(given string) bool {
	_, ok := g.misses.Get(given)
	return ok
}

func (g *gateway) miss(given string) { g.misses.Add(given, struct{}{}) }

// unmiss forgets cached not-founds for a sandbox that now exists.
func (g *gateway) unmiss(s nodeapi.Sandbox) {
	g.misses.Remove(s.ID)
	g.misses.Remove(RenderID(s.ID))
}

// dropRoute forgets every cached route to the sandbox rawID, under any
// spelling it was asked by.
func (g *gateway) dropRoute(rawID string) {
	for _, k := range g.routes.Keys() {
		if rt, ok := g.routes.Peek(k); ok && rt.id == rawID {
			g.routes.Remove(k)
		}
	}
}

// cachedRoute is key's route when cached, not expired at now and not
// stale in the live fleet view. A hit is a Peek (a shared lock: concurrent
// requests do not serialize on it) and does not refresh the entry's
// recency; a route in use is re-added, and so refreshed, each routeTTL.
//
// Stale: the view (Fleet.ViewByID, memory only) holds the sandbox paused,
// or at another agent address (a sandbox resumed from its disk). A pause
// through this gateway drops the route itself (forget); one made anywhere
// else — the Kubernetes API's pause subresource, another replica, the
// node's idle auto-pause — reaches every replica's view through the
// node's change stream, and the route ends there: the request is routed
// afresh (route: the node confirms the pause, and the answer is e2b's 502
// or an autoResume), instead of going to the paused VM's agent and
// hanging until a resume. A sandbox the view does not hold (yet) keeps
// its route.
func (g *gateway) cachedRoute(key string, now time.Time) (route, bool) {
	rt, ok := g.routes.Peek(key)
	if !ok || !now.Before(rt.exp) {
		return rt, false
	}
	if s, seen := g.fleet.ViewByID(rt.id); seen && (s.Paused || s.AgentAddr != "" && s.AgentAddr != rt.addr) {
		g.routes.Remove(key)
		return route{}, false
	}
	return rt, true
}
