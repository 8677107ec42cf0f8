package claim

import (
	"context"
	"errors"
	"math/rand/v2"

	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/node"
	"github.com/hearthvm/hearth/pool"
	"github.com/hearthvm/hearth/sandbox"
)

// Candidate is a node advertising warm capacity for a key.
type Candidate struct {
	Node, Addr string
	// Warm is the advertised warm count for the key (> 0).
	Warm int32
}

// Candidates lists the routable nodes of v advertising warm > 0 for key.
// A pool matches when its template equals key.Template and its net and size
// equal key's after normalization (empty net is none, empty size is small).
// A node with several matching pool rows contributes one candidate per row.
func Candidates(v *inventory.View, key pool.Key) []Candidate {
	var out []Candidate
	kNet, kSize := normNet(key.Net), normSize(key.Size)
	for _, n := range v.Nodes() {
		if n.Address == "" {
			continue
		}
		for _, p := range n.Pools {
			if p.Warm > 0 && p.Template == key.Template && normNet(p.Net) == kNet && normSize(p.Size) == kSize {
				out = append(out, Candidate{Node: n.Name, Addr: n.Address, Warm: p.Warm})
			}
		}
	}
	return out
}

func normNet(s string) string {
	if s == "" {
		return sandbox.NetNone
	}
	return s
}

func normSize(s string) string {
	if s == "" {
		return sandbox.SizeSmall
	}
	return s
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
type Try func(ctx context.Context, c Candidate) (node.ClaimResult, error)

// Route claims from cands until one delivers: a capacity miss (429), a
// dial error or a 5xx (node.NotDelivered) drops that candidate and samples
// again; any other error, including a timeout after the request was sent
// (the microVM may have been delivered), fails at once. With no candidates
// left it returns *ErrNoWarmCapacity for key. cands is consumed.
func Route(ctx context.Context, key pool.Key, cands []Candidate, r *rand.Rand, try Try) (Delivery, error) {
	var lastErr error
	for len(cands) > 0 {
		if err := ctx.Err(); err != nil {
			return Delivery{}, err
		}
		i := Pick(cands, r)
		c := cands[i]
		res, err := try(ctx, c)
		if err == nil && res.ID != "" {
			if res.Node == "" {
				res.Node = c.Node
			}
			return Delivery{ClaimResult: res, Node: c.Node, NodeAddr: c.Addr}, nil
		}
		if err != nil && !node.NotDelivered(err) {
			return Delivery{}, err
		}
		if err == nil {
			err = errors.New("node answered without a claim id")
		}
		lastErr = err
		cands[i] = cands[len(cands)-1]
		cands = cands[:len(cands)-1]
	}
	return Delivery{}, &ErrNoWarmCapacity{Key: key, Last: lastErr}
}
