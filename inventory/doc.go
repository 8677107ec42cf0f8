// +k8s:deepcopy-gen=package
// +groupName=sandbox.cocoonstack.io

// Package inventory owns NodeInventory — the one object per node that
// carries the node's warm pools and claimed sandboxes — and the fleet view
// assembled from those objects.
//
// NodeInventory lives in sandbox.cocoonstack.io/v1beta1, cluster-scoped,
// with metadata.name == .node. Nodes server-side-apply their own object on a
// cadence; nothing per sandbox is ever written to the API (CONTRACT §4).
package inventory
