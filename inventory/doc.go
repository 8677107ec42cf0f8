// +k8s:deepcopy-gen=package
// +groupName=sandbox.cocoonstack.io

// Package inventory owns NodeInventory — the one object per node that
// carries the node's warm pools and claimed sandboxes — and the fleet view
// assembled from those objects.
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
