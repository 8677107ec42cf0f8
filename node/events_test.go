package node

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/nodeapi"
)

func TestAppendEvent_RepeatsCountAndTheRingKeepsTheNewest(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 16, 0, 0, 0, time.UTC)
	ev := func(reason, msg string, s int) nodeapi.Event {
		return nodeapi.Event{Type: nodeapi.EventNormal, Reason: reason, Message: msg, FirstTime: t0.Add(time.Duration(s) * time.Second), Count: 1}
	}
	for _, tc := range []struct {
		name  string
		in    []nodeapi.Event
		add   nodeapi.Event
		limit int
		want  []string // reason/message×count, oldest first
	}{
		{"first", nil, ev("Claimed", "c", 0), 4, []string{"Claimed/c×1"}},
		{"a repeat of the newest counts on it", []nodeapi.Event{ev("Paused", "p", 0)}, ev("Paused", "p", 1), 4, []string{"Paused/p×2"}},
		{"another message is another event", []nodeapi.Event{ev("Paused", "p", 0)}, ev("Paused", "q", 1), 4, []string{"Paused/p×1", "Paused/q×1"}},
		{"only the newest aggregates", []nodeapi.Event{ev("Paused", "p", 0), ev("Resumed", "r", 1)}, ev("Paused", "p", 2), 4, []string{"Paused/p×1", "Resumed/r×1", "Paused/p×1"}},
		{"past the limit the oldest goes", []nodeapi.Event{ev("A", "", 0), ev("B", "", 1), ev("C", "", 2)}, ev("D", "", 3), 3, []string{"B/×1", "C/×1", "D/×1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := append([]nodeapi.Event(nil), tc.in...)
			got := appendEvent(tc.in, tc.add, tc.limit)
			var s []string
			for _, e := range got {
				s = append(s, fmt.Sprintf("%s/%s×%d", e.Reason, e.Message, e.Count))
			}
			require.Equal(t, tc.want, s)
			require.Equal(t, before, tc.in, "the old slice is shared with readers: never modified")
			last := got[len(got)-1]
			require.Equal(t, tc.add.FirstTime, last.LastTime)
		})
	}
}

func reasons(evs []nodeapi.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Reason)
	}
	return out
}

// A sandbox's lifecycle events are on its lookups (by id and by claim
// ref), in order, survive a node restart, and are never on the whole
// list, a claim's answer or the change stream.
func TestSandboxEvents_RecordedAtEachStepShownOnLookupsAndSurviveARestart(t *testing.T) {
	drv := newFakeDriver()
	cfg := Config{Name: "n1", DataDir: t.TempDir(), Driver: drv, RootToken: testRoot, ReapInterval: 50 * time.Millisecond, RefillInterval: 50 * time.Millisecond}
	a := runNode(t, cfg)
	_, err := a.root.PutPools(bg, pools("img", 2))
	require.NoError(t, err)
	a.waitWarm(t, "img", 2)
	sb, err := a.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/one", TTLSeconds: 600})
	require.NoError(t, err)
	require.Empty(t, sb.Events, "a claim's answer carries no events")
	require.NoError(t, a.root.Pause(bg, sb.ID))
	require.NoError(t, a.root.Resume(bg, sb.ID))
	snap, err := a.root.Snapshot(bg, sb.ID, "s1")
	require.NoError(t, err)
	kids, err := a.root.Fork(bg, sb.ID, nodeapi.ForkRequest{Count: 1})
	require.NoError(t, err)

	got, err := a.root.Get(bg, sb.ID)
	require.NoError(t, err)
	require.Equal(t, []string{"Claimed", "Paused", "Resumed", "SnapshotTaken", "Forked"}, reasons(got.Events))
	require.Contains(t, got.Events[3].Message, snap.ID)
	require.Contains(t, got.Events[4].Message, kids[0].ClaimRef)
	require.Equal(t, int64(3), got.Version, "events change no Version (claim, pause, resume)")
	byRef, err := a.root.GetByRef(bg, "ns/one")
	require.NoError(t, err)
	require.Equal(t, got.Events, byRef[0].Events)
	kid, err := a.root.Get(bg, kids[0].ID)
	require.NoError(t, err)
	require.Equal(t, []string{"Claimed"}, reasons(kid.Events))
	require.Equal(t, "forked from ns/one", kid.Events[0].Message)
	clone, err := a.root.ClaimSnapshot(bg, snap.ID, 0)
	require.NoError(t, err)
	cl, err := a.root.Get(bg, clone.ID)
	require.NoError(t, err)
	require.Equal(t, "cloned from snapshot "+snap.ID, cl.Events[0].Message)

	list, err := a.root.List(bg)
	require.NoError(t, err)
	for _, s := range list {
		require.Empty(t, s.Events, "the whole list carries no events")
	}
	a.mu.Lock()
	for _, s := range a.tab.hub.sbs {
		require.Empty(t, s.Events, "the change stream carries no events")
	}
	a.mu.Unlock()

	a.crash()
	b := runNode(t, cfg)
	after, err := b.root.Get(bg, sb.ID)
	require.NoError(t, err)
	require.Equal(t, []string{"Claimed", "Paused", "Resumed", "SnapshotTaken", "Forked", "Restored"}, reasons(after.Events))
	require.Equal(t, got.Events, after.Events[:5])
}

// A pool whose boots fail reports how many failed in a row and the last
// error (what the warm-pool controller turns into BootFailed events), on
// GET /v1/info and PUT /v1/pools' answer; a boot that succeeds clears both.
func TestPoolInfo_ReportsBootFailuresUntilABootSucceeds(t *testing.T) {
	drv := newFakeDriver()
	tn := startNode(t, drv, nil)
	drv.FailClones(2)
	_, err := tn.root.PutPools(bg, pools("img", 1))
	require.NoError(t, err)
	var failed nodeapi.PoolInfo
	deadline := time.Now().Add(30 * time.Second)
	for failed.BootFailures == 0 {
		require.True(t, time.Now().Before(deadline), "no boot failure reported")
		info, err := tn.root.Info(bg)
		require.NoError(t, err)
		for _, p := range info.Pools {
			if p.Template == "img" {
				failed = p
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	require.Contains(t, failed.BootError, "injected clone failure")
	tn.waitWarm(t, "img", 1)
	info, err := tn.root.PutPools(bg, pools("img", 1))
	require.NoError(t, err)
	require.Equal(t, int32(0), info.Pools[0].BootFailures)
	require.Empty(t, info.Pools[0].BootError)
}

func TestBootError_CutToTheBoundOnARuneBoundary(t *testing.T) {
	long := strings.Repeat("é", nodeapi.MaxBootErrorBytes) // 2 bytes each
	got := bootError(errors.New("x" + long))
	require.LessOrEqual(t, len(got), nodeapi.MaxBootErrorBytes)
	require.True(t, utf8.ValidString(got))
	require.Equal(t, "short", bootError(errors.New("short")))
}

// A warm claim stores no event (its one write is what it was); its Claimed
// is rendered from ClaimedAt, unless the ring has filled since. A clone
// keeps its own.
func TestEvents_AWarmClaimsClaimedIsRenderedNotStored(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 17, 0, 0, 0, time.UTC)
	warm := record{ID: "sb_1", ClaimedAt: t0}
	require.Equal(t, []string{"Claimed"}, reasons(events(&warm)))
	require.Equal(t, t0, events(&warm)[0].FirstTime)
	warm.record(nodeapi.Event{Type: nodeapi.EventNormal, Reason: nodeapi.ReasonPaused, FirstTime: t0})
	require.Equal(t, []string{"Claimed", "Paused"}, reasons(events(&warm)))
	for i := range nodeapi.MaxSandboxEvents {
		warm.record(nodeapi.Event{Type: nodeapi.EventNormal, Reason: fmt.Sprint("R", i), FirstTime: t0})
	}
	require.Len(t, events(&warm), nodeapi.MaxSandboxEvents, "a full ring: the Claimed has been dropped")
	require.Equal(t, "R0", events(&warm)[0].Reason)
	clone := record{ID: "sb_2", ClaimedAt: t0, Snapshot: "sn_1"}
	require.Empty(t, events(&clone), "a clone records its own Claimed, naming its snapshot")

	tn := startNode(t, newFakeDriver(), nil)
	_, err := tn.root.PutPools(bg, pools("img", 1))
	require.NoError(t, err)
	tn.waitWarm(t, "img", 1)
	sb, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img"})
	require.NoError(t, err)
	tn.mu.Lock()
	stored := tn.tab.byID[sb.ID].rec.Events
	tn.mu.Unlock()
	require.Empty(t, stored)
	got, err := tn.root.Get(bg, sb.ID)
	require.NoError(t, err)
	require.Equal(t, []string{"Claimed"}, reasons(got.Events))
	require.True(t, got.Events[0].FirstTime.Equal(sb.ClaimedAt))
}
