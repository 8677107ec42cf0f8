package node

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hearthvm/hearth/internal/testagent"
	"github.com/hearthvm/hearth/nodeapi"
)

func TestPlanOOM_ReportsGrowthOnlyPastABaseline(t *testing.T) {
	known := func(k uint64) oomCount { return oomCount{Kills: k, Known: true} }
	held := map[string]bool{"a": true, "b": true}
	for _, tc := range []struct {
		name     string
		readings []oomReading
		held     map[string]bool
		st       oomCounts
		grew     map[string]uint64
		next     map[string]oomCount
	}{
		{
			name:     "first sweep after a start: readings are baselines",
			readings: []oomReading{{"a", 3}, {"b", 0}},
			held:     held,
			st:       oomCounts{},
			next:     map[string]oomCount{"a": known(3), "b": known(0)},
		},
		{
			name:     "first sweep: a paused sandbox's baseline stays unknown",
			readings: []oomReading{{"a", 3}},
			held:     held,
			st:       oomCounts{},
			next:     map[string]oomCount{"a": known(3), "b": {}},
		},
		{
			name:     "unknown baseline is set by the first reading, later",
			readings: []oomReading{{"b", 5}},
			held:     map[string]bool{"b": true},
			st:       oomCounts{started: true, seen: map[string]oomCount{"b": {}}},
			next:     map[string]oomCount{"b": known(5)},
		},
		{
			name:     "a sandbox new since the last sweep counts from 0",
			readings: []oomReading{{"a", 1}, {"b", 2}},
			held:     held,
			st:       oomCounts{started: true, seen: map[string]oomCount{"a": known(1)}},
			grew:     map[string]uint64{"b": 2},
			next:     map[string]oomCount{"a": known(1), "b": known(0)},
		},
		{
			name:     "growth is reported, the old count kept until written",
			readings: []oomReading{{"a", 7}, {"b", 4}},
			held:     held,
			st:       oomCounts{started: true, seen: map[string]oomCount{"a": known(3), "b": known(4)}},
			grew:     map[string]uint64{"a": 4},
			next:     map[string]oomCount{"a": known(3), "b": known(4)},
		},
		{
			name:     "a count that went down (restarted VM) is the new baseline",
			readings: []oomReading{{"a", 1}},
			held:     map[string]bool{"a": true},
			st:       oomCounts{started: true, seen: map[string]oomCount{"a": known(9)}},
			next:     map[string]oomCount{"a": known(1)},
		},
		{
			name:     "released sandboxes are forgotten, their late readings ignored",
			readings: []oomReading{{"gone", 9}},
			held:     map[string]bool{"a": true},
			st:       oomCounts{started: true, seen: map[string]oomCount{"a": known(0), "gone": known(1)}},
			next:     map[string]oomCount{"a": known(0)},
		},
		{
			name: "an unread (paused) sandbox keeps its count",
			held: map[string]bool{"a": true},
			st:   oomCounts{started: true, seen: map[string]oomCount{"a": known(2)}},
			next: map[string]oomCount{"a": known(2)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			grew, next := planOOM(tc.readings, tc.held, tc.st)
			if !reflect.DeepEqual(grew, tc.grew) {
				t.Errorf("grew = %v, want %v", grew, tc.grew)
			}
			if !next.started || !reflect.DeepEqual(next.seen, tc.next) {
				t.Errorf("next = %+v, want %v", next, tc.next)
			}
		})
	}
}

func TestOOMMessage_CountsAndNamesTheLimit(t *testing.T) {
	if got := oomMessage(1, ""); got != "1 process killed for memory (limit 2048 MiB)" {
		t.Fatal(got)
	}
	if got := oomMessage(3, "medium"); got != "3 processes killed for memory (limit 8192 MiB)" {
		t.Fatal(got)
	}
}

// A process of a sim sandbox that allocates past the sandbox's memory
// limit is killed by the kernel's OOM killer, and the health sweep records
// a Warning OOMKilled event the sandbox's lookup shows. The test lowers the
// VM's cgroup limit (the size class's 2 GiB would take too long to fill).
func TestNode_Sim_OOMKillIsAnEventOnTheLookup(t *testing.T) {
	root := filepath.Join(t.TempDir(), "vms")
	drv := newSim(t, root)
	tn := startNode(t, drv, func(c *Config) { c.WarmCheckInterval = 50 * time.Millisecond })
	if _, err := tn.root.PutPools(bg, pools("img", 1)); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 1)
	sb, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/oom", TTLSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	tn.mu.Lock()
	h := tn.tab.byID[sb.ID].rec.Handle
	tn.mu.Unlock()

	rel := drv.Cgroup(h.ID)
	dir, usage, limit := filepath.Join("/sys/fs/cgroup/memory", rel), "memory.usage_in_bytes", "memory.limit_in_bytes"
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		dir, usage, limit = filepath.Join("/sys/fs/cgroup", rel), "memory.current", "memory.max"
	}
	b, err := os.ReadFile(filepath.Join(dir, usage))
	if err != nil {
		t.Fatal(err)
	}
	used, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, limit), []byte(strconv.FormatInt(used+64<<20, 10)), 0); err != nil {
		t.Fatal(err)
	}
	if got, _ := tn.root.Get(bg, sb.ID); hasReason(got.Events, nodeapi.ReasonOOMKilled) {
		t.Fatalf("an OOMKilled event before any kill: %+v", got.Events)
	}

	// A string that doubles until the shell is killed; the shell offers
	// itself to the OOM killer first (the agent, larger under -race, must
	// not be its pick).
	res := testagent.Run(t, sb.AgentAddr, sb.Token, "", `echo 1000 >/proc/self/oom_score_adj; a=xxxxxxxxxxxxxxxx; while :; do a=$a$a; done`)
	if res.Exit == 0 {
		t.Fatalf("the allocating shell survived: %v", res)
	}

	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := tn.root.Get(bg, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if e, ok := eventOf(got.Events, nodeapi.ReasonOOMKilled); ok {
			if e.Type != nodeapi.EventWarning || !strings.Contains(e.Message, "killed for memory (limit 2048 MiB)") {
				t.Fatalf("OOMKilled event %+v", e)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no OOMKilled event after the kill: %+v", got.Events)
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronization
	}
}

func eventOf(evs []nodeapi.Event, reason string) (nodeapi.Event, bool) {
	for _, e := range evs {
		if e.Reason == reason {
			return e, true
		}
	}
	return nodeapi.Event{}, false
}

func hasReason(evs []nodeapi.Event, reason string) bool {
	_, ok := eventOf(evs, reason)
	return ok
}
