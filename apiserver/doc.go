// Package apiserver is the aggregated API server of Hearth: it serves
// agents.x-k8s.io/v1beta1 sandboxes (create, get, list, watch, delete) and
// the subresources pause, resume, fork and snapshot (CONTRACT §5), built on
// k8s.io/apiserver in the sample-apiserver shape: Options → Config →
// CompletedConfig.New() → Server.Run.
//
// Nothing about a sandbox is stored. Create is a warm claim routed by the
// claim.Fleet; reads are synthesized from the NodeInventory view
// (inventory.Viewer), and reads of one sandbox (Get, a name-pinned list or
// watch) ask the nodes live so they never wait for a publish. Delete
// releases by claim id, never by name. Server-side dry-run is refused (400)
// on every write, so a dry run never spends or releases a microVM.
//
// The package owns the sandboxes storage, its scheme (Scheme, Codecs) and
// OpenAPI definitions, and the server wiring. Embedders (sandbox-dev)
// install more API groups with ExtraConfig.ExtraAPIGroups and add their
// OpenAPI definitions with ExtraConfig.ExtraOpenAPIDefinitions; they may run
// without a kube-apiserver (anonymous authentication, always-allow
// authorization, a self-signed loopback certificate: see Options).
package apiserver
