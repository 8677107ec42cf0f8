package fleet

import (
	"context"
	"errors"
	"time"

	"k8s.io/klog/v2"

	"github.com/hearthvm/hearth/nodeapi"
)

// ClaimTimeout bounds a claim that Detached runs: routing and every node
// asked (a node client gives up on one call after 30 s too).
const ClaimTimeout = 30 * time.Second

// ErrAbandoned is Detached's answer when the caller went away before the
// claim's: what the claim delivered was released.
var ErrAbandoned = errors.New("the client went away before the claim's answer; what it claimed was released")

// Releaser gives a claimed sandbox back (NodeFleet.Release).
type Releaser interface {
	Release(ctx context.Context, s nodeapi.Sandbox) error
}

// Detached is how every front door claims (a Kubernetes Create, an e2b
// create, fork or create from a snapshot): it runs claim on a context
// with ctx's values but not its cancellation, bounded by ClaimTimeout, so
// the claim reaches its outcome whatever the caller does — a claim
// cancelled with its caller can be granted by a node whose answer is then
// lost, a microVM nobody knows of until its lease ends. If ctx has ended
// when claim returns, the caller will never learn what was claimed: every
// sandbox claim returned is released (on a context of its own) and the
// answer is ErrAbandoned. Otherwise it is claim's.
func Detached(ctx context.Context, r Releaser, claim func(ctx context.Context) ([]nodeapi.Sandbox, error)) ([]nodeapi.Sandbox, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ClaimTimeout)
	defer cancel()
	sbs, err := claim(cctx)
	if err != nil || ctx.Err() == nil {
		return sbs, err
	}
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), ClaimTimeout)
	defer rcancel()
	for _, s := range sbs {
		if rerr := r.Release(rctx, s); rerr != nil && !errors.Is(rerr, ErrNotFound) {
			klog.ErrorS(rerr, "Releasing a claim whose client went away; its node reaps it at its deadline", "ref", s.ClaimRef, "id", s.ID, "node", s.Node)
		}
	}
	return nil, ErrAbandoned
}
