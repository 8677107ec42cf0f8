package node

import (
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hearthvm/hearth/vmm"
)

func TestPlanEvictions(t *testing.T) {
	ok := func(id string) warmProbe { return warmProbe{ID: id, OK: true} }
	fail := func(id string) warmProbe { return warmProbe{ID: id} }
	gone := func(id string) warmProbe { return warmProbe{ID: id, Gone: true} }
	set := func(ids ...string) map[string]bool {
		m := map[string]bool{}
		for _, id := range ids {
			m[id] = true
		}
		return m
	}
	for _, tc := range []struct {
		name      string
		probes    []warmProbe
		warm      map[string]bool
		strikes   map[string]int
		evict     []string
		nextStrks map[string]int
	}{
		{name: "no warm VMs", warm: set(), strikes: map[string]int{"a": 1}, nextStrks: map[string]int{}},
		{name: "all healthy", probes: []warmProbe{ok("a"), ok("b")}, warm: set("a", "b"), nextStrks: map[string]int{}},
		{name: "first failure is a strike", probes: []warmProbe{fail("a"), ok("b")}, warm: set("a", "b"),
			nextStrks: map[string]int{"a": 1}},
		{name: "second failure in a row evicts", probes: []warmProbe{fail("a"), ok("b")}, warm: set("a", "b"),
			strikes: map[string]int{"a": 1}, evict: []string{"a"}, nextStrks: map[string]int{}},
		{name: "a success clears the strike", probes: []warmProbe{ok("a")}, warm: set("a"),
			strikes: map[string]int{"a": 1}, nextStrks: map[string]int{}},
		{name: "gone evicts at once", probes: []warmProbe{gone("a"), fail("b")}, warm: set("a", "b"),
			evict: []string{"a"}, nextStrks: map[string]int{"b": 1}},
		{name: "claimed meanwhile is left alone", probes: []warmProbe{gone("a"), fail("b")}, warm: set("c"),
			strikes: map[string]int{"b": 1}, nextStrks: map[string]int{}},
		{name: "strikes of VMs not probed are dropped", probes: []warmProbe{ok("a")}, warm: set("a", "new"),
			strikes: map[string]int{"old": 1, "new": 1}, nextStrks: map[string]int{}},
		{name: "evictions in probe order", probes: []warmProbe{fail("z"), gone("m"), fail("a"), fail("q")},
			warm: set("a", "m", "q", "z"), strikes: map[string]int{"z": 1, "a": 3},
			evict: []string{"z", "m", "a"}, nextStrks: map[string]int{"q": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evict, next := planEvictions(tc.probes, tc.warm, tc.strikes)
			if !reflect.DeepEqual(evict, tc.evict) {
				t.Errorf("evict = %v, want %v", evict, tc.evict)
			}
			if !reflect.DeepEqual(next, tc.nextStrks) {
				t.Errorf("strikes = %v, want %v", next, tc.nextStrks)
			}
		})
	}
}

// A warm agent that dies is evicted by the health sweep, destroyed and
// replaced; claims then deliver only live agents.
func TestNode_Sim_EvictsDeadWarmVM(t *testing.T) {
	root := filepath.Join(t.TempDir(), "vms")
	drv := newSim(t, root)
	tn := startNode(t, drv, func(c *Config) { c.WarmCheckInterval = 50 * time.Millisecond })
	if _, err := tn.root.PutPools(bg, pools("img", 2)); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 2)

	warmIDs := func() map[string]vmm.Handle {
		tn.mu.Lock()
		defer tn.mu.Unlock()
		out := map[string]vmm.Handle{}
		for _, p := range tn.tab.pools {
			for _, h := range p.warm {
				out[h.ID] = h
			}
		}
		return out
	}
	before := warmIDs()
	var dead, alive vmm.Handle
	for _, h := range before {
		if dead.ID == "" {
			dead = h
		} else {
			alive = h
		}
	}
	if dead.PID <= 0 || alive.ID == "" {
		t.Fatalf("warm handles %+v", before)
	}
	if err := syscall.Kill(-dead.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	evictions := func() string {
		_, body := rawDo(t, "GET", tn.srv.URL+"/metrics", "", "")
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, "hearth_node_warm_evictions_total ") {
				return strings.TrimPrefix(l, "hearth_node_warm_evictions_total ")
			}
		}
		return ""
	}
	waitFor(t, func() bool { return evictions() == "1" })
	waitFor(t, func() bool {
		w := warmIDs()
		_, stale := w[dead.ID]
		return !stale && len(w) == 2
	})
	waitFor(t, func() bool { _, err := os.Stat(dead.Dir); return os.IsNotExist(err) })
	if _, ok := warmIDs()[alive.ID]; !ok {
		t.Fatalf("the healthy warm VM %s was evicted too", alive.ID)
	}

	for i := 0; i < 2; i++ {
		res, err := tn.root.Claim(bg, ClaimRequest{Template: "img"})
		if err != nil {
			t.Fatal(err)
		}
		if res.OwnerAddr == dead.Addr {
			t.Fatalf("claim %d delivered the dead VM's address %s", i, dead.Addr)
		}
		if code := agentHealth(res.OwnerAddr); code != http.StatusNoContent {
			t.Fatalf("claim %d delivered an agent answering %d", i, code)
		}
	}
	if got := evictions(); got != "1" {
		t.Fatalf("evictions = %s, want 1", got)
	}
}
