// Package deps holds no code: its test checks the import graph, so that
// clients of the node HTTP API (the fleet, both API surfaces, the warm-pool
// driver) link its wire types (package nodeapi) and not the daemon (package
// node, with bbolt, prometheus and the VMM drivers), and so that the
// in-guest agent (package agent: interpreter, pty, process code) is linked
// by its command (and the fakes that run it as a guest) alone, everyone
// else speaking its wire package agentapi, which links only the standard
// library and golang.org/x. It also keeps the module's rooms readable: no
// hand-written non-test Go file is over 800 lines (generated code, tests,
// testdata and the nested modules aside).
package deps
