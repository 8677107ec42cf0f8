// Package fleetview owns the live fleet view of an API server replica:
// it subscribes to every node's change stream (GET /v1/watch), keeps the
// fleet's entries and warm pools current from them (Store: O(1) per
// change, a revision per change, a bounded history for watch resume), and
// falls back to a node's published NodeInventory while its stream is down
// (Live). It serves the fleet its nodes (inventory.Viewer: addresses and
// warm pools) and its sandboxes (fleet.Locator: by name, by claim id, all),
// and the sandboxes storage its list/watch source and revisions — one
// store, read as of its last applied change, never a rebuilt copy.
//
// It must not write anything: NodeInventory stays the nodes' to publish,
// and no state here survives a restart (revisions are per process; see
// Store).
package fleetview
