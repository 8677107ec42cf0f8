package fleet

import (
	"context"
	"fmt"

	"github.com/hearthvm/hearth/nodeapi"
)

// ClaimSnapshot claims a new sandbox cloned from snap on the node holding
// it (snap.Node, addressed through the view), recorded under req.ClaimRef
// with req.TTLSeconds, req.Metadata and req.Lifecycle — the node records
// them, and its change stream carries the metadata to every replica —;
// req's key is ignored (the snapshot's key is the sandbox's). The delivery is indexed like a claim's, so it is visible at
// once. An unknown node is ErrNotFound; the node's refusals keep their
// status (a snapshot it no longer holds is ErrNotFound).
func (f *NodeFleet) ClaimSnapshot(ctx context.Context, snap nodeapi.Snapshot, req nodeapi.ClaimRequest) (nodeapi.Sandbox, error) {
	if snap.ID == "" {
		return nodeapi.Sandbox{}, ErrNotFound
	}
	n, ok := f.cfg.View.View().Node(snap.Node)
	if !ok || n.Address == "" {
		return nodeapi.Sandbox{}, fmt.Errorf("%w: node %q of snapshot %s is not routable", ErrNotFound, snap.Node, snap.ID)
	}
	s, err := f.client(n.Name, n.Address).ClaimSnapshotAs(ctx, snap.ID, nodeapi.SnapshotClaimRequest{TTLSeconds: req.TTLSeconds, ClaimRef: req.ClaimRef, Metadata: req.Metadata, Lifecycle: req.Lifecycle})
	if err != nil {
		return nodeapi.Sandbox{}, nodeErr(err)
	}
	s = located(s, n.Name, n.Address)
	if s.ClaimRef == "" {
		s.ClaimRef = req.ClaimRef
	}
	if s.Template == "" {
		s.Template, s.Net, s.Size = snap.Key.Template, snap.Key.Net, snap.Key.Size
	}
	f.index.put(s)
	return s, nil
}
