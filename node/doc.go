// Package node is the node daemon sandboxd: it holds warm pools of microVMs
// per pool key, boots them through a vmm.Driver, hands them out in O(1)
// under one mutex, serves the node HTTP API of docs/API.md#node-api (its wire types
// and client are package nodeapi: a sandbox is one nodeapi.Sandbox record,
// rendered from the claim table by Node.wire), reaps leases at their
// deadline, and publishes the node's NodeInventory (entries converted by
// inventory.EntryOf, without the claims' metadata) and its change stream
// (GET /v1/watch: the same entries with the metadata; watch.go).
//
// What a claim carried — the object's user part and the metadata (a
// snapshot claim's metadata too; a fork child its parent's) — is stored
// with the claim, in its durable record (table.go's record; the
// claim journal), and returned by every lookup of the sandbox: after a
// node restart, and to any API server replica, the node's record is the
// truth of what a create stored. A claim is checked on receipt against
// the claim rules, nodeapi.ClaimRequest.Validate (docs/API.md#claim-rules:
// env, metadata, labels and annotations, the object's bounds; 413 past a
// bound, else 400), before anything is claimed; the metadata's bound
// matters because the change stream carries it to every replica.
//
// Names: a claim ref names at most one live sandbox on a node. A claim,
// a fork child or a named snapshot claim of a held ref is refused with 409,
// checked and inserted under the table's one mutex (table.holder), so of
// concurrent claims of one ref exactly one is delivered and the others
// spend no warm VM. Fork children are named "<ns>/<parent>-fork-<n>" (the
// first free n; see forkName). Each record also keeps the Kubernetes
// object's user part (nodeapi.Object: labels, annotations, spec, managed
// fields; bounded, 413 beyond) and a Version counting its changes, which
// PUT /v1/sandboxes/{id}/labels may be conditional on. Its e2b visibility
// (nodeapi.Lifecycle.E2B) is decided once, at claim, from the claim's
// labels (sandbox.LabelE2B), inherited by fork children and recorded on
// its snapshots (nodeapi.Snapshot.E2B) for their clones; a label change
// never changes it, nor can a request set it.
//
// Embedding: New returns a Node whose Handler can be served on any listener,
// so one process may run several nodes (sandbox-dev runs N of them, each on
// its own loopback listener, each with its own DataDir and driver root).
// Run starts the background loops; Close shuts down in order.
//
// What it owns: the claim table (in memory, mirrored under Config.DataDir
// in a bbolt file, node.db, and the claim journals node.db.journal0 and
// node.db.journal1), the warm pools, the golden checkpoints it clones warm VMs
// from (<data-dir>/golden), the user snapshots (<data-dir>/snapshots),
// and every VM under its driver's root. It must not touch anything else:
// routing between nodes, pool sizing across the fleet and the Kubernetes
// objects are other packages' jobs, and no client of its API may import it
// (they import nodeapi; internal/deps checks).
//
// Auth: every route but /healthz and /metrics needs a bearer token. Root is
// the node's own token (Config.NodeToken = nodeapi.NodeToken(fleet secret,
// Name), all the fleet and the warm-pool driver ever send; sandboxd
// --node-token-file) or an operator's root token (Config.RootToken,
// --token-file; sandbox-dev's root-token). A sandbox's own token opens
// only that sandbox's routes. The node never needs the fleet secret:
// sandboxd --write-node-token derives its token once (an init container)
// so the daemon holds only its own.
//
// Health: a background sweep (Config.WarmCheckInterval, default 10s)
// probes every warm VM's agent off the claim path and evicts, destroys and
// refills one that fails twice in a row or that its driver reports gone, so
// a claim does not hand out a warm VM whose agent died after boot (between
// two sweeps it still can). The same sweep probes every claimed sandbox that
// is not paused and brings back one whose agent died the same way
// through Driver.Restore (same run directory, so its files survive; new PID
// and address, persisted and published); a failed restore keeps the claim
// (listed, releasable, reaped at its deadline) and is retried after a
// bounded backoff, so a claimed sandbox is never destroyed by the sweep.
// See health.go.
//
// Events: each sandbox's record keeps its last nodeapi.MaxSandboxEvents
// lifecycle events (claimed, paused, resumed, forked, snapshot taken,
// lease expired, restored, restore failed, OOM-killed; a repeat of the
// newest counts on it), written by the change each describes (no write of
// their own on the claim path; an OOM kill is one write by the OOM
// sweep that read the driver's grown count, vmm.OOMCounter: oom.go),
// surviving restarts, and rendered only on lookups (by id, by claim ref).
// With Config.Events (a Kubernetes client: sandboxd --kubeconfig,
// --publish-in-cluster) each but Claimed of a sandbox with a claim ref is
// also written, as it is recorded, as an events.k8s.io/v1 Event regarding
// its Sandbox object, uid the aggregated API's (kubeevents.go); a claim
// never writes one. Each pool reports its boots that failed in a row,
// the last one's error and the warm VMs the sweep evicted
// (nodeapi.PoolInfo), on GET /v1/info and PUT /v1/pools' answer. See
// events.go.
//
// Quotas: a sandbox tree (a claimed or snapshot-started sandbox and every
// fork below it) may fork Quota.MaxForkDepth generations deep and hold
// Quota.MaxTreeChildren fork children at once; the node holds at most
// Quota.MaxNodeExtraVMs VMs beyond its warm pools and Quota.MaxSnapshotBytes
// of snapshots. Over a bound the request fails 429 and creates nothing, for
// a sandbox token and root alike. A snapshot taken with a sandbox token is
// removed when its sandbox is released; root's are kept unless it asks
// otherwise (keep: false), and root may promote a sandbox's snapshot (POST
// /v1/snapshots/{id}/promote). Only root may keep a snapshot (403). See
// quota.go.
//
// Slow clients: Handler bounds each request (Config.Timeouts: the body
// must arrive, and the answer leave, in time); cmd/sandboxd serves it with
// internal/serve's header and idle timeouts and the process's connection
// budget (serve.Shared: a connection that has not sent a full request gives
// way to a newcomer). The health sweep never reads the node's own resource
// exhaustion (EMFILE, ENFILE) as a failed probe; a warm agent that does
// not answer in time (hung) fails its probe and is replaced after two in a
// row, while a claimed sandbox is never restarted over a timeout. New drops
// a recorded claim only when its VM is known gone.
//
// Durability: every claim, release and lifecycle change is appended to
// the claim journal and fdatasynced (one fdatasync; bbolt would take two)
// before the API answers, so an acknowledged claim survives a power loss.
// A lone claim appends at once; claims arriving while an append is in
// flight share the next one (leader-follower group commit; see store.go),
// so the fsync costs latency, not throughput. Full journal generations are
// checkpointed into bbolt in the background; New replays what bbolt does
// not hold yet. A change whose append fails is answered as failed and is
// not replayed after a crash (a release then keeps the sandbox: 500, retry
// it). Config.StoreNoSync turns the fsync off (development only).
//
// Egress: a claim's egress policy (nodeapi.ClaimRequest.Egress) is
// enforced by the driver (vmm.EgressEnforcer) before the sandbox serves
// its first request, but not before the claim is answered: the VMs of a
// lane where the driver enforces and checks policies (the egress lane of
// a vmm.EgressChecker: sim, qemu) boot held (vmm.Spec.Hold; the agent's
// --hold), a claim checks its policy (409 for what the driver cannot
// enforce), records the claim and answers, then enforces the policy and
// opens the agent (agentapi.OpenPath) holding the sandbox's lock, so its
// other operations wait; a failure then removes the sandbox as a failed
// claim would (hearth_node_claim_opens_total{result="failed"}). Every new
// start of a held VM — a clone, a resume without memory, a restore, a
// node restart that found a claim not yet opened — enforces and opens
// again before anything else, or (at a restart) removes the sandbox. See
// open.go. Other lanes and drivers enforce before the answer.
//
// Restart: New re-adopts every recorded sandbox through Driver.Restore,
// then destroys every VM under the driver's root that the table does not
// own (warm VMs of the previous run, half-booted leftovers). Warm VMs are
// never persisted: they are rebuilt from the persisted pool targets.
//
// Traces (trace.go): with Config.TracerProvider set, every API request but
// the change stream, /healthz, /metrics and untraced /v1/pools and
// /v1/info rounds is a server span — continuing
// the caller's W3C traceparent for root, starting a new trace linked to it
// for anyone else — and holds a span per driver call (vmm.<op>) and a
// client span per agent call it makes (which carries the trace on). Nil,
// nothing is wrapped and no span is made.
package node
