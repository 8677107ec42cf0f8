package fleet_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/nodeapi"
)

type releases struct {
	mu  sync.Mutex
	ids []string
}

func (r *releases) Release(ctx context.Context, s nodeapi.Sandbox) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = append(r.ids, s.ID)
	return nil
}

type ctxKey struct{}

// TestDetached_AClaimWhoseCallerWentAwayIsReleased: the claim runs on a
// context the caller's cancellation does not reach (its values kept, a
// deadline of its own); what it delivers to a caller that has gone is
// released, and the answer is ErrAbandoned.
func TestDetached_AClaimWhoseCallerWentAwayIsReleased(t *testing.T) {
	ctx, cancel := context.WithCancel(context.WithValue(t.Context(), ctxKey{}, "v"))
	var rel releases
	sbs, err := fleet.Detached(ctx, &rel, func(cctx context.Context) ([]nodeapi.Sandbox, error) {
		cancel() // the caller goes away while the claim is in flight
		require.NoError(t, cctx.Err(), "the claim is not cancelled with its caller")
		require.Equal(t, "v", cctx.Value(ctxKey{}))
		_, ok := cctx.Deadline()
		require.True(t, ok, "the claim is bounded")
		return []nodeapi.Sandbox{{ID: "sb_1"}, {ID: "sb_2"}}, nil
	})
	require.ErrorIs(t, err, fleet.ErrAbandoned)
	require.Nil(t, sbs)
	require.Equal(t, []string{"sb_1", "sb_2"}, rel.ids)
}

// TestDetached_AnAnsweredClaimIsKept: a caller still there gets the claim's
// answer, sandboxes or error, and nothing is released.
func TestDetached_AnAnsweredClaimIsKept(t *testing.T) {
	var rel releases
	sbs, err := fleet.Detached(t.Context(), &rel, func(context.Context) ([]nodeapi.Sandbox, error) {
		return []nodeapi.Sandbox{{ID: "sb_1"}}, nil
	})
	require.NoError(t, err)
	require.Len(t, sbs, 1)
	boom := errors.New("boom")
	ctx, cancel := context.WithCancel(t.Context())
	_, err = fleet.Detached(ctx, &rel, func(context.Context) ([]nodeapi.Sandbox, error) {
		cancel()
		return nil, boom
	})
	require.ErrorIs(t, err, boom, "a failed claim keeps its error")
	require.Empty(t, rel.ids)
}
