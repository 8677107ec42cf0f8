package fleet

import (
	"context"
	"errors"
	"math/rand/v2"

	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
)

// Candidate is a node advertising warm capacity for a key.
type Candidate struct {
	Node, NodeAddr string
	// Warm is the advertised warm count for the key (> 0).
	Warm int32
}

// Candidates lists the routable nodes of v advertising warm > 0 for key.
// A pool matches when its key equals key after normalization
// (pool.Key.Normalize); a row that does not normalize matches nothing. A
// node with several matching pool rows contributes one candidate per row.
func Candidates(v *inventory.View, key pool.Key) []Candidate {
	want, err := key.Normalize()
	if err != nil {
		return nil
	}
	var out []Candidate
	for _, n := range v.Nodes() {
		if n.Address == "" {
			continue
		}
		for _, p := range n.Pools {
			if p.Warm <= 0 || p.Template != key.Template {
				continue
			}
			if pk, err := (pool.Key{Template: p.Template, Net: p.Net, Size: p.Size}).Normalize(); err == nil && pk == want {
				out = append(out, Candidate{Node: n.Name, NodeAddr: n.Address, Warm: p.Warm})
			}
		}
	}
	return out
}

// Pick chooses a candidate index by power of two choices: two draws
// uniformly with replacement; the second wins only if strictly warmer. A
// single candidate is taken directly. It returns -1 when cands is empty.
// Advertised capacity is stale by up to a publish period, so Pick spreads a
// burst over warm nodes instead of funnelling it onto the warmest one.
func Pick(cands []Candidate, r *rand.Rand) int {
	switch len(cands) {
	case 0:
		return -1
	case 1:
		return 0
	}
	a, b := r.IntN(len(cands)), r.IntN(len(cands))
	if cands[b].Warm > cands[a].Warm {
		return b
	}
	return a
}

// Try delivers one claim from a candidate node.
type Try func(ctx context.Context, c Candidate) (nodeapi.Sandbox, error)

// Route claims from cands until one delivers: a capacity miss (429), a
// dial error or a 5xx (nodeapi.NotDelivered) drops that candidate and samples
// again; any other error, including a timeout after the request was sent
// (the microVM may have been delivered), fails at once. With no candidates
// left it returns *ErrNoWarmCapacity for key. cands is consumed.
// The delivered sandbox is located on the candidate that delivered it.
func Route(ctx context.Context, key pool.Key, cands []Candidate, r *rand.Rand, try Try) (nodeapi.Sandbox, error) {
	var lastErr error
	for len(cands) > 0 {
		if err := ctx.Err(); err != nil {
			return nodeapi.Sandbox{}, err
		}
		i := Pick(cands, r)
		c := cands[i]
		res, err := try(ctx, c)
		if err == nil && res.ID != "" {
			return located(res, c.Node, c.NodeAddr), nil
		}
		if err != nil && !nodeapi.NotDelivered(err) {
			return nodeapi.Sandbox{}, err
		}
		if err == nil {
			err = errors.New("node answered without a claim id")
		}
		lastErr = err
		cands[i] = cands[len(cands)-1]
		cands = cands[:len(cands)-1]
	}
	return nodeapi.Sandbox{}, &ErrNoWarmCapacity{Key: key, Last: lastErr}
}
