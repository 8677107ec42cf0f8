// Package pool owns warm capacity: the pool key and, in the controller, the
// mapping of SandboxWarmPool objects onto per-node warm targets.
//
// A warm pool is keyed by (template, net, size). KeyFor is the one
// derivation every caller uses — the aggregated Create, the warm-pool
// controller reading a SandboxTemplate, and the e2b surface — because a template
// and a claim that disagree on a key make every create a 503 (docs/API.md#pool-key).
// Key.Normalize is the one normalization of a key's axes (net "" → none,
// size "" → small, unknown values rejected): KeyFor ends in it, the fleet
// routes by it and the node decodes requests with it.
// The key functions are pure: no I/O, no clock. The package must not know
// nodes or the fleet; the controller (pool/controller) speaks to nodes through
// nodeapi only.
package pool
