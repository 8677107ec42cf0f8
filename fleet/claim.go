package fleet

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"k8s.io/klog/v2"

	"github.com/hearthvm/hearth/nodeapi"
)

// doubt is a claim of a name sent to a node that never answered.
type doubt struct {
	node, addr string
	until      time.Time // the lease it asked for has surely ended by then
}

// maxDoubts bounds the doubts kept; the one closest to expiry goes first.
const maxDoubts = 4096

// doubtLifetime is how long a doubt of a claim that asked for the node's
// default lease is kept: beyond any default lease (node.DefaultLimits).
const doubtLifetime = time.Hour

// Claim routes the request to a warm node (see Route), sets the record's
// defaults from the request and records it in the claim-time index.
//
// A claim of a name that reached a node without an answer coming back is
// ErrOutcomeUnknown, and the name is remembered as in doubt: the next claim
// of it first asks that node. If the node holds the name the claim is the
// node's 409 (the first claim landed); if it does not, the claim proceeds;
// if it does not answer, the claim is ErrClaimInDoubt (503) rather than a
// second microVM for one name on another node.
func (f *NodeFleet) Claim(ctx context.Context, req nodeapi.ClaimRequest) (nodeapi.Sandbox, error) {
	key, err := req.Key().Normalize()
	if err != nil {
		return nodeapi.Sandbox{}, err
	}
	req.Template, req.Net, req.Size = key.Template, key.Net, key.Size
	if err := f.resolveDoubt(ctx, req.ClaimRef); err != nil {
		return nodeapi.Sandbox{}, err
	}
	cands := Candidates(f.cfg.View.View(), key)
	r := rand.New(lockedSource{f})
	var (
		last    Candidate // the node asked last, and what it answered
		lastErr error
	)
	s, err := Route(ctx, key, cands, r, func(ctx context.Context, c Candidate) (nodeapi.Sandbox, error) {
		s, err := f.client(c.Node, c.NodeAddr).Claim(ctx, req)
		last, lastErr = c, err
		return s, err
	})
	if err != nil {
		if err == lastErr && nodeapi.StatusOf(err) == 0 && !nodeapi.NotDelivered(err) {
			// Sent, and no answer: the node may hold the claim.
			if req.ClaimRef != "" {
				f.addDoubt(req.ClaimRef, last, req.TTLSeconds)
			}
			klog.InfoS("A claim got no answer from its node; its outcome is unknown", "ref", req.ClaimRef, "node", last.Node, "err", err)
			return nodeapi.Sandbox{}, &ErrOutcomeUnknown{Ref: req.ClaimRef, Node: last.Node, Err: err}
		}
		return nodeapi.Sandbox{}, err
	}
	if s.ClaimRef == "" {
		s.ClaimRef = req.ClaimRef
	}
	if s.Template == "" {
		s.Template, s.Net, s.Size = key.Template, key.Net, key.Size
	}
	if s.Metadata == nil {
		s.Metadata = req.Metadata
	}
	f.index.put(s)
	return s, nil
}

// addDoubt remembers that ref's claim on c has an unknown outcome.
func (f *NodeFleet) addDoubt(ref string, c Candidate, ttlSeconds int64) {
	life := doubtLifetime
	if ttlSeconds > 0 {
		life = time.Duration(ttlSeconds)*time.Second + time.Minute
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.doubts[ref]; !ok && len(f.doubts) >= maxDoubts {
		var first string
		for r, d := range f.doubts {
			if first == "" || d.until.Before(f.doubts[first].until) {
				first = r
			}
		}
		delete(f.doubts, first)
	}
	f.doubts[ref] = doubt{node: c.Node, addr: c.NodeAddr, until: time.Now().Add(life)}
}

// resolveDoubt settles a doubt on ref before ref is claimed again: nil when
// there is none or the node it names does not hold ref, the node's 409
// when it does (the sandbox is indexed), ErrClaimInDoubt when the node
// does not answer.
func (f *NodeFleet) resolveDoubt(ctx context.Context, ref string) error {
	if ref == "" {
		return nil
	}
	f.mu.Lock()
	d, ok := f.doubts[ref]
	if ok && time.Now().After(d.until) {
		delete(f.doubts, ref)
		ok = false
	}
	f.mu.Unlock()
	if !ok {
		return nil
	}
	forget := func() {
		f.mu.Lock()
		if f.doubts[ref] == d {
			delete(f.doubts, ref)
		}
		f.mu.Unlock()
	}
	s, err := f.ask(ctx, d.node, d.addr, ref, true)
	switch {
	case err == nil:
		forget()
		f.index.put(s)
		return &nodeapi.HTTPError{Status: http.StatusConflict,
			Message: fmt.Sprintf("claim_ref %s is held by sandbox %s on node %s (an earlier claim whose answer was lost)", ref, s.ID, s.Node)}
	case errors.Is(err, ErrNotFound):
		forget()
		return nil
	}
	return &ErrClaimInDoubt{Ref: ref, Node: d.node, Err: err}
}
