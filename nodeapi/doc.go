// Package nodeapi is the wire of the node daemon's HTTP API (docs/API.md#node-api):
// its request and response types, a Go client (Client) and the error
// helpers its callers branch on (HTTPError, StatusOf, NotDelivered,
// ErrNoCapacity, ErrNotFound). The daemon (package node) serves these
// types; the fleet, both API surfaces and the warm-pool driver speak them.
//
// It owns the wire and nothing else: it must not import the daemon
// (package node), the VMM drivers, bbolt or prometheus (internal/deps
// checks), and it holds no state beyond a client's address and token.
//
// # Words
//
// A sandbox is paused and resumed (never hibernated or woken); a snapshot
// is a saved sandbox a new sandbox can be claimed from (never a checkpoint
// or a branch). A lease is the time a sandbox is granted: asked for as
// ttl_seconds, ending at its deadline. AgentAddr is the sandbox agent's
// host:port; NodeAddr the node daemon's.
//
// # Routes
//
// Bearer-token auth: root — the node's own token (NodeToken, what the
// fleet sends) or an operator's root token — for every route; a sandbox's
// own token for the /v1/sandboxes/{id}… routes of that sandbox. Errors are
// {"error":"..."} with the status; a 429 from POST /v1/claim means no warm
// VM for the key on this node. A claim ref names at most one live sandbox
// per node: a claim, fork child or snapshot claim of a held ref is a 409
// (checked and recorded under the claim table's lock, so of two concurrent
// claims of one ref exactly one is delivered).
//
//	POST   /v1/claim                      ClaimRequest → Sandbox (with token)
//	GET    /v1/sandboxes                  → SandboxList (no tokens)
//	GET    /v1/sandboxes?claim_ref=ns/n   → SandboxList (404 when none)
//	GET    /v1/sandboxes/{id}             → Sandbox (token for root callers)
//	POST   /v1/sandboxes/{id}/release     → 204
//	POST   /v1/sandboxes/{id}/pause       → 204 (idempotent)
//	POST   /v1/sandboxes/{id}/resume      → 204 (idempotent)
//	POST   /v1/sandboxes/{id}/fork        ForkRequest → ForkResult (children with tokens)
//	POST   /v1/sandboxes/{id}/snapshot    SnapshotRequest → SnapshotResult
//	POST   /v1/sandboxes/{id}/renew       RenewRequest → RenewResult
//	PUT    /v1/sandboxes/{id}/labels      LabelsRequest → Sandbox (409 on a stale version)
//	GET    /v1/sandboxes/{id}/stats       → Stats
//	GET    /v1/sandboxes/{id}/logs        ?since=&tail=&limit= → agentapi.Logs (the agent's log; 409 paused, 502 agent)
//	GET    /v1/sandboxes/{id}/logs        ?follow=true&since=&tail= → ndjson agentapi.LogEntry as written, until paused or released (FollowLogs; 429 past 4 per sandbox, 256 per node)
//	GET    /v1/snapshots                  → SnapshotList (newest first)
//	DELETE /v1/snapshots/{id}             → 204
//	POST   /v1/snapshots/{id}/claim       SnapshotClaimRequest → Sandbox (with token, no claim_ref)
//	POST   /v1/snapshots/{id}/promote     → Snapshot (kept after its sandbox's release; root)
//	PUT    /v1/pools                      PoolsRequest → Info
//	GET    /v1/info                       → Info
//	GET    /healthz, GET /metrics         no token
//
// # JSON shapes
//
// Times are RFC 3339 with nanoseconds (Go's time.Time); deadlines are whole
// seconds, claim times milliseconds (so that sandboxes claimed within one
// second still order by claim time).
//
//	ClaimRequest         {template, net?, size?, ttl_seconds?, claim_ref?, env?, metadata?,
//	                      labels?, annotations?, spec?, managed_fields?}
//	Sandbox              {id, node, node_addr?, template, net, size, claim_ref?, agent_addr,
//	                      token?, deadline, claimed_at, paused, metadata?, version?,
//	                      labels?, annotations?, spec?, managed_fields?}
//	LabelsRequest        {labels?, annotations?, managed_fields?, version?}
//	SandboxList          {sandboxes: [Sandbox]}
//	ForkRequest          {count, ttl_seconds?}
//	ForkResult           {children: [Sandbox]}
//	SnapshotRequest      {name?, keep?}
//	Snapshot             {id: "sn_…", name?, sandbox_id, key: {template, net, size}, created_at, node?, namespace?, e2b?, kept?, bytes?}
//	SnapshotResult       {snapshot: Snapshot}
//	SnapshotList         {snapshots: [Snapshot]}
//	SnapshotClaimRequest {ttl_seconds?, claim_ref?, metadata?, on_timeout?, auto_resume?}
//	RenewRequest         {ttl_seconds}
//	RenewResult          {deadline}
//	Stats                {id, cpu_count, mem_total_bytes, mem_used_bytes, mem_used_measured,
//	                      rss_bytes?, private_bytes?, shared_bytes?, cpu_seconds?,
//	                      cpu_rate_cores?, cpu_rate_window_seconds?, disk_total_bytes?, disk_used_bytes?,
//	                      measured_at, paused}
//	PoolsRequest         {pools: [{template, net?, size?, warm}]}
//	Info                 {node, node_addr, vmm, accel?, pools: [{template, net, size, warm, target, refilling}],
//	                      claimed, paused, lease_default_seconds?, lease_max_seconds?}
//	Error                {error}
//
// labels, annotations, spec and managed_fields are Object: the Kubernetes
// object's user part, recorded with the claim and kept across restarts
// (spec an opaque JSON object, managed_fields an opaque JSON array). The
// JSON of labels, annotations and spec together is bounded by
// MaxObjectBytes (16 KiB), managed_fields by MaxManagedFieldsBytes
// (32 KiB); a node answers 413 beyond. A claim's metadata is bounded by
// MaxMetadataKeys (1,000) and MaxMetadataBytes (64 KiB of keys and values,
// MetadataBytes); a node answers 413 beyond, 400 for an empty key. A
// snapshot claim carries metadata with the same bounds
// (SnapshotClaimRequest.Validate). The node records it, a fork child
// inherits its parent's, and the change stream carries it: no replica
// keeps metadata the node does not.
//
// # One claim request, one set of rules
//
// ClaimRequest is the one claim request of every front door (a Kubernetes
// Create, an e2b create, a SandboxClaim): each builds one (ClaimFor) and
// the fleet routes it on its Key. ClaimRequest.Validate is every rule of a
// claim that needs no node (docs/API.md#claim-rules): the env
// (MaxEnvVars, MaxEnvBytes, names without '=' or a control character,
// values without NUL), the metadata's bounds, labels and annotations as
// Kubernetes validates them and the object's bounds (Object.Validate),
// ttl_seconds, claim_ref and on_timeout (Lifecycle.Validate); ClaimStatus
// is the node's answer to a breach (413 past a bound, else 400). The node
// calls it on receipt and every front door before asking any node, so
// the doors agree and a bad claim costs no round trip.
//
// A fork child inherits its parent's
// labels, annotations, spec and metadata and is named "<ns>/<parent>-fork-<n>" (the
// first n from 1 that no sandbox of the node holds). version counts a
// record's changes (pause, resume, renew, labels) and starts at 1; a
// LabelsRequest with a non-zero version is applied only at that version.
// A sandbox without a claim ref is named "default/<id>" with the id made a
// DNS label (DNSName).
//
// Sandbox is the one record of a claimed sandbox across Hearth: the node
// returns it from claim, fork, snapshot claim and every lookup; the fleet
// returns it located (node, node_addr) to both API surfaces; the
// NodeInventory entry is converted from it once (inventory.EntryOf).
package nodeapi
