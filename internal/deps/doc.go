// Package deps holds no code: its test checks the import graph, so that
// clients of the node HTTP API (the fleet, both API surfaces, the warm-pool
// driver) link its wire types (package nodeapi) and not the daemon (package
// node, with bbolt, prometheus and the VMM drivers).
package deps
