// Package fleetview owns the live fleet view of an API server replica:
// it subscribes to every node's change stream (GET /v1/watch), keeps the
// fleet's entries and warm pools current from them (Store: O(1) per
// change, a revision per change, a bounded history for watch resume), and
// falls back to a node's published NodeInventory while its stream is down
// (Live). It serves the fleet its nodes (inventory.Viewer: addresses and
// warm pools) and its sandboxes (fleet.Locator: by name, by claim id, all),
// and the sandboxes storage its list/watch source and revisions — one
// store, read as of its last applied change, never a rebuilt copy. It is
// the one read model: fleet.New and the sandboxes storage require it
// (fleet.View, sandboxstore.Config.Live), and every resourceVersion the
// Kubernetes API hands out is one of its revisions.
//
// An entry is what the node's stream carries: pool key, labels,
// annotations, e2b visibility and the claim's metadata (inventory.Entry),
// so every
// replica's list filters — label selectors, e2b's metadata filter — work
// after any restart. It says which node holds the sandbox; the spec and
// managed fields stay in that node's record (a Get asks the node: package
// fleet). A published NodeInventory carries no metadata: an entry adopted
// from one keeps the metadata the stream gave its claim id (Store.put),
// and a sandbox only ever seen published has none until its node's stream
// is back.
//
// It must not write anything: NodeInventory stays the nodes' to publish,
// and no state here survives a restart (revisions are per process; see
// Store).
package fleetview
