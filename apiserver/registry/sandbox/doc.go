// Package sandboxstore is the REST storage of agents.x-k8s.io/v1beta1
// sandboxes and their lifecycle subresources pause, resume, fork and
// snapshot (docs/API.md#subresources), installed by the aggregated API server with
// Resources.
//
// Nothing is stored in etcd. Create derives the key (pool.KeyForSandbox)
// and lease (fleet.LeaseFor), records the object's user part on the node
// with the claim (nodeapi.Object: labels and annotations without the
// stamped keys, the spec without operatingMode and shutdownTime, and
// managedFields; bounded by nodeapi.MaxObjectBytes, 16 KiB for labels,
// annotations and spec together, and nodeapi.MaxManagedFieldsBytes, 32
// KiB: 422 beyond, before any node is asked) and renders the delivered
// nodeapi.Sandbox like any read (objectOf). Reads are rendered from that
// one record: live lookups through the fleet (Get, a name-pinned list,
// never waiting for a publish: the holding node's record, with
// spec and managedFields, on every replica and after any restart — the
// view only says which node to ask) and, for List and Watch, the live
// fleet view (Config.Live, live.go: a revision per applied change,
// Kubernetes resume and 410 semantics; an Update accepts the revision a
// list or event gave the object while it is still current; a name-pinned
// watch is a watch of the view filtered to the name, asking no node, and
// opens from a revision the view does not know with the name's state,
// DELETED when gone, instead of 410) or, without
// one, the NodeInventory view re-derived on a cadence (watch.go) — both
// fed by the nodes' published items (labels and annotations are published,
// so label selectors see the user's labels; spec and managedFields are
// not, so a list item's spec carries only operatingMode and shutdownTime).
// With a live view, a Get (and an Update's answer, a subresource's, and a
// name-pinned list) carries the revision the view gave that
// state — the resourceVersion its lists and watches carry — once the view
// has applied it (read, live.go: waits up to 1 s while the node's stream
// is applied); otherwise, and for a Create's answer, the entry's content
// hash. An Update accepts either while current. metadata.uid is a
// name-based UUID of node and claim id (uidOf): the same on Create, Get,
// List and Watch, on every replica and after a node restart. The stamped
// labels node/phase/claim/template and annotations claim-id/address/
// deadline win over the user's keys of the same name.
//
// Names are unique per namespace: Create checks the fleet (Held) before
// claiming and the node refuses a second claim of one claim ref (409);
// both are AlreadyExists. The one residual race (two replicas, two nodes,
// one publish window) is described in package fleet; Delete releases, by
// claim id, every microVM any node records under the name, so it always
// completes. Update serves PUT and PATCH (merge, JSON, strategic merge,
// server-side apply with managedFields): labels and annotations are
// mutable, spec.operatingMode pauses and resumes, spec.shutdownTime renews
// (clamped), any other spec change is 422 and a stale resourceVersion 409
// (the node's labels update is conditional on the record's version).
// deletecollection is not served (405). Server-side dry-run is refused
// (400) on every write. Errors map through fleet.HTTPStatus, as on the e2b
// surface.
//
// It owns the storage adapters (storage, watch, subresources, convert,
// filter, table, errors) and declares the Fleet it needs; it must not talk
// to nodes except through that Fleet, nor import the node daemon.
package sandboxstore
