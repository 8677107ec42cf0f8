package sandboxstore

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/nodeapi"
)

func TestCoreEvents_RegardTheSandboxObject(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 17, 0, 0, 0, time.UTC)
	s := &nodeapi.Sandbox{ID: "sb_1", Node: "n1", ClaimRef: "ns/demo", Events: []nodeapi.Event{
		{Type: "Normal", Reason: "Claimed", Message: "claimed a warm microVM", FirstTime: t0, LastTime: t0, Count: 1},
		{Type: "Normal", Reason: "Paused", Message: "paused", FirstTime: t0, LastTime: t0.Add(time.Minute), Count: 3},
	}}
	evs := CoreEvents(s)
	require.Len(t, evs, 2)
	e := evs[1]
	require.Equal(t, "Sandbox", e.InvolvedObject.Kind)
	require.Equal(t, "demo", e.InvolvedObject.Name)
	require.Equal(t, "ns", e.InvolvedObject.Namespace)
	require.Equal(t, synthesize(s, 1).UID, e.InvolvedObject.UID, "the Sandbox object's uid: kubectl describe selects by it")
	require.Equal(t, int32(3), e.Count)
	require.Equal(t, t0.Add(time.Minute), e.LastTimestamp.Time)
	require.Equal(t, "sandboxd", e.Source.Component)
	require.Equal(t, "n1", e.Source.Host)
	require.NotEqual(t, evs[0].Name, evs[1].Name)
}
