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
// nodeapi.Sandbox like any read (read, live.go).
//
// One read model: the live fleet view (Config.Live, a *fleetview.Live,
// required: Validate refuses a Config without it and Resources panics),
// which follows every node's change stream. Every list (a name-pinned one
// too) is at one of its revisions and every watch streams its changes as
// each is applied (Kubernetes resume and 410 semantics; a name-pinned
// watch is a watch of the view filtered to the name, asking no node and
// never polling, and opens from a revision the view does not know with the
// name's state, DELETED when gone, instead of 410). Lookups go through the
// fleet (Get, an Update's current state, a subresource's answer): the
// holding node's record, with spec and managedFields, on every replica and
// after any restart — the view only says which node to ask, never waiting
// for a publish. List items and watch events carry what the view's entries
// do (labels and annotations, so label selectors see the user's labels;
// not spec or managedFields, so an item's spec carries only operatingMode
// and shutdownTime).
//
// One revision scheme: every resourceVersion a client sees — a Create's
// answer, a Get, a list and its items, a watch event, an Update's or a
// subresource's answer — is a revision of the live view, never a content
// hash (inventory.Hash is only the check that the view's entry is the
// node's record). A record read from a node carries the revision the view
// gave that state, once the view has applied it (read waits up to
// revisionWait, 1 s, while the node's stream is applied), so a Get, a list
// item and a watch event of one state carry one resourceVersion. When the
// view does not hold the state in time (the node's stream is down or
// lags), the answer carries the view's revision read before the node was
// asked: a watch from it misses no change since (it may repeat one), and an
// Update naming a resourceVersion is 409 Conflict until the view holds the
// current state (one naming none proceeds). Revisions are per replica: a
// watch from another replica's is 410 Gone. metadata.uid is a
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
// completes, and answers once the nodes and the live view no longer hold
// them (a list after it does not show them). Update serves PUT and PATCH (merge, JSON, strategic merge,
// server-side apply with managedFields): labels and annotations are
// mutable, spec.operatingMode pauses and resumes, spec.shutdownTime renews
// (clamped), any other spec change is 422 and a stale resourceVersion 409
// (the node's labels update is conditional on the record's version).
// deletecollection is not served (405). Server-side dry-run is refused
// (400) on every write. Errors map through fleet.HTTPStatus, as on the e2b
// surface.
//
// It owns the storage adapters (storage, live, watch, subresources,
// convert, filter, table, errors) and declares the Fleet and LiveSource it
// needs; it must not talk
// to nodes except through that Fleet, nor import the node daemon.
package sandboxstore
