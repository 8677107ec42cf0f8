// +k8s:deepcopy-gen=package
// +groupName=sandbox.cocoonstack.io

// Package inventory owns NodeInventory — the one object per node that
// carries the node's warm pools and claimed sandboxes — and the published
// view assembled from those objects (View, kept by Source's informer or a
// test's Static). That view is the live fleet view's membership and
// fallback (package fleetview, Published), never a read model of its own:
// the API servers' lists, watches and lookups read the live view, which
// follows each node's change stream; nothing diffs published views. The
// live view's changes are typed here (Change, Versioned, EventType) so the
// fleet and the sandboxes storage share them.
//
// NodeInventory lives in sandbox.cocoonstack.io/v1beta1, cluster-scoped,
// with metadata.name == .node. Nodes server-side-apply their own object on a
// cadence; nothing per sandbox is ever written to the API (docs/API.md#nodeinventory).
//
// An entry carries the user's labels and annotations recorded with the
// claim (nodeapi.Object), so lists and label selectors see them; spec and
// managed fields stay on the node. Each sandbox's labels, annotations and
// spec are bounded by nodeapi.MaxObjectBytes (16 KiB), but a node's object
// must stay under the API server's object size limit (etcd: 1.5 MiB), so
// a node holding many sandboxes with large annotations can outgrow it.
//
// EntryOf is the one conversion of a sandbox record (nodeapi.Sandbox) into
// an entry — its name (NameOf: the claim ref, else "default/<id>") and
// phase (PhaseOf: Running or Paused) — and Item.Sandbox the way back for a
// published entry. The package must not talk to nodes or serve HTTP.
package inventory
