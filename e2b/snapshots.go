package e2b

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/sandbox"
)

// isSnapshotID reports whether a templateID names a snapshot by id (the
// node's "sn_…", or its DNS-safe rendering).
func isSnapshotID(id string) bool {
	return strings.HasPrefix(id, "sn_") || strings.HasPrefix(id, "sn-")
}

// snapshots lists the snapshots the request's key sees: its namespace's
// taken of a sandbox the key saw (nodeapi.Snapshot.E2B). A snapshot of
// another sandbox of the namespace (Kubernetes' sandboxes/snapshot) is
// not the key's to list, clone — a clone's memory may hold its source's
// token — or delete.
func (g *gateway) snapshots(ctx context.Context) ([]nodeapi.Snapshot, error) {
	all, err := g.fleet.Snapshots(ctx)
	if err != nil {
		return nil, err
	}
	ns := g.namespaceOf(ctx)
	out := all[:0:0]
	for _, c := range all {
		if c.Namespace == ns && c.E2B {
			out = append(out, c)
		}
	}
	return out, nil
}

// snapshotByID finds a snapshot the key sees (snapshots) by id (either
// spelling).
func (g *gateway) snapshotByID(ctx context.Context, id string) (nodeapi.Snapshot, error) {
	snaps, err := g.snapshots(ctx)
	if err != nil {
		return nodeapi.Snapshot{}, err
	}
	for _, c := range snaps {
		if MatchID(c.ID, id) {
			return c, nil
		}
	}
	return nodeapi.Snapshot{}, fleet.ErrNotFound
}

// snapshotNamed finds the newest snapshot the key sees (snapshots) named
// name.
func (g *gateway) snapshotNamed(ctx context.Context, name string) (nodeapi.Snapshot, bool) {
	snaps, err := g.snapshots(ctx)
	if err != nil {
		return nodeapi.Snapshot{}, false
	}
	for _, c := range snaps { // newest first
		if c.Name == name {
			return c, true
		}
	}
	return nodeapi.Snapshot{}, false
}

// claimSnapshot starts a sandbox from the namespace's snapshot id, on the
// node holding it.
func (g *gateway) claimSnapshot(ctx context.Context, id string, req nodeapi.ClaimRequest) (nodeapi.Sandbox, error) {
	snap, err := g.snapshotByID(ctx, id)
	if err != nil {
		return nodeapi.Sandbox{}, err
	}
	return g.cloneSnapshot(ctx, snap, req)
}

// errSnapshotEgress refuses a create from a snapshot with an egress
// policy of its own (a 400): the clone keeps its snapshot's
// (docs/API.md#egress-policy), and a list silently dropped would be a
// policy half-applied.
var errSnapshotEgress = errors.New("network.allowOut and network.denyOut cannot be set on a create from a snapshot: the sandbox keeps the snapshot's egress policy")

// errSnapshotEnv refuses a create from a snapshot with envVars (a 400): a
// clone resumes its snapshot's processes with their environment, and the
// node has no env to give a snapshot claim — dropped silently, they would
// be a claim half-applied.
var errSnapshotEnv = errors.New("envVars cannot be set on a create from a snapshot: the sandbox resumes the snapshot's processes with their environment")

// cloneSnapshot claims a clone of snap — e2b's like the snapshot
// (nodeapi.Lifecycle.E2B, which the node gives the clone) — and records
// req.Object's labels on it (a node records no object with a snapshot
// claim), so that it is labelled like any e2b create; a clone that cannot
// be labelled is released and the create fails.
func (g *gateway) cloneSnapshot(ctx context.Context, snap nodeapi.Snapshot, req nodeapi.ClaimRequest) (nodeapi.Sandbox, error) {
	if req.Egress != nil {
		return nodeapi.Sandbox{}, errSnapshotEgress
	}
	if len(req.Env) > 0 {
		return nodeapi.Sandbox{}, errSnapshotEnv
	}
	s, err := g.fleet.ClaimSnapshot(ctx, snap, req)
	if err != nil || len(req.Object.Labels) == 0 || s.Labels[sandbox.LabelE2B] == req.Object.Labels[sandbox.LabelE2B] {
		return s, err
	}
	labels := map[string]string{}
	for k, v := range s.Labels {
		labels[k] = v
	}
	for k, v := range req.Object.Labels {
		labels[k] = v
	}
	labelled, err := g.fleet.SetLabels(ctx, s, nodeapi.LabelsRequest{Labels: labels, Annotations: s.Annotations, Version: s.Version})
	if err != nil {
		g.releaseOrphans(ctx, s)
		return nodeapi.Sandbox{}, fmt.Errorf("labelling the clone of snapshot %s: %w", snap.ID, err)
	}
	if labelled.Token == "" {
		labelled.Token = s.Token
	}
	return labelled, nil
}

type snapshotJSON struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

func snapshotOf(c nodeapi.Snapshot) snapshotJSON {
	s := snapshotJSON{SnapshotID: c.ID, Names: []string{}}
	if c.Name != "" {
		s.Names = append(s.Names, c.Name)
	}
	return s
}

func (g *gateway) handleSnapshot(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name string `json:"name"`
	}
	if !decodeBody(w, r, &req) {
		return
	}
	s, ok := g.sandboxFor(w, r)
	if !ok {
		return
	}
	c, err := g.fleet.Snapshot(r.Context(), s, req.Name)
	if err != nil {
		failSandbox(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, snapshotOf(c))
}

func (g *gateway) handleListSnapshots(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := maxListLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxListLimit {
			writeError(w, http.StatusBadRequest, "limit %q must be an integer in [1, %d]", s, maxListLimit)
			return
		}
		limit = n
	}
	cps, err := g.snapshots(r.Context())
	if err != nil {
		fail(w, err, "snapshots")
		return
	}
	sbx, name, after := q.Get("sandboxID"), q.Get("name"), q.Get("nextToken")
	sort.Slice(cps, func(i, j int) bool { return cps[i].ID < cps[j].ID })
	out := []snapshotJSON{}
	next := ""
	for _, c := range cps {
		if sbx != "" && !MatchID(c.SandboxID, sbx) || name != "" && c.Name != name || after != "" && c.ID <= after {
			continue
		}
		if len(out) == limit {
			next = out[len(out)-1].SnapshotID
			break
		}
		out = append(out, snapshotOf(c))
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	writeJSON(w, http.StatusOK, out)
}

func (g *gateway) handleDeleteSnapshot(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	snap, err := g.snapshotByID(r.Context(), id)
	if err == nil {
		err = g.fleet.DeleteSnapshot(r.Context(), snap.ID)
	}
	if err != nil {
		fail(w, err, "snapshot "+strconv.Quote(id))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
