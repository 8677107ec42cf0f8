package nodeapi

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/hearthvm/hearth/egress"
	"github.com/hearthvm/hearth/pool"
)

// ClaimRequest is the body of POST /v1/claim, and the one claim request
// of every front door (a Kubernetes Create, an e2b create, a SandboxClaim):
// each builds one (ClaimFor) and hands it to the fleet, which routes it on
// its Key and sends it to a node as it is.
type ClaimRequest struct {
	Template string `json:"template"`
	Net      string `json:"net,omitempty"`
	Size     string `json:"size,omitempty"`
	// TTLSeconds is the asked lease length; 0 asks for the node default.
	TTLSeconds int64 `json:"ttl_seconds,omitempty"`
	// ClaimRef is "<namespace>/<name>"; lookups by name use it.
	ClaimRef string `json:"claim_ref,omitempty"`
	// Env is applied to the guest's process environment (the agent's /init;
	// bounded by MaxEnvVars and MaxEnvBytes, see Validate),
	// and applied again whenever the VM restarts from its files (a resume
	// after a pause without memory, the restore of a dead agent).
	Env map[string]string `json:"env,omitempty"`
	// Metadata is kept with the sandbox and returned by lookups (bounded
	// by MaxMetadataBytes and MaxMetadataKeys).
	Metadata map[string]string `json:"metadata,omitempty"`
	// Lifecycle is what the lease's end does (default: destroy).
	Lifecycle
	// Object is the Kubernetes object's user part, recorded with the
	// claim (see Object; bounded by MaxObjectBytes).
	Object
	// Egress is the sandbox's egress policy (package egress), fixed at
	// claim time, enforced by the node outside the guest and inherited by
	// forks and snapshot claims; nil: the lane's own (none, or egress
	// unfiltered).
	Egress *egress.Policy `json:"egress,omitempty"`
}

// What a lease's end does to a sandbox (Lifecycle.OnTimeout).
const (
	// OnTimeoutKill destroys the sandbox (the default).
	OnTimeoutKill = "kill"
	// OnTimeoutPause pauses it, memory and file system kept; it stays
	// paused, past its deadline, until resumed (which grants a new lease)
	// or released.
	OnTimeoutPause = "pause"
)

// Lifecycle is a sandbox's timeout behaviour, recorded with the claim
// (surviving node restarts) and returned by lookups.
type Lifecycle struct {
	// OnTimeout is OnTimeoutKill (or empty) or OnTimeoutPause.
	OnTimeout string `json:"on_timeout,omitempty"`
	// AutoResume asks a gateway to resume the paused sandbox on its next
	// data-plane request (the node only records it).
	AutoResume bool `json:"auto_resume,omitempty"`
	// PauseWithoutMemory makes the timeout's pause a pause without memory
	// (see PauseRequest).
	PauseWithoutMemory bool `json:"pause_without_memory,omitempty"`
	// PrivateTraffic asks a gateway to open the sandbox's ports other than
	// the agent's only to its traffic access token (e2b's
	// network.allowPublicTraffic false); the node only records it, and a
	// fork child inherits it.
	PrivateTraffic bool `json:"private_traffic,omitempty"`
	// PublicTraffic asks a gateway to open the sandbox's ports other than
	// the agent's to anyone (e2b's default, network.allowPublicTraffic):
	// only an e2b create sets it, so a sandbox made any other way (the
	// Kubernetes API, a SandboxClaim, the node API) answers only its
	// tokens on every port. The node only records it; a fork child
	// inherits it (the parent's holder asked for the fork). PrivateTraffic
	// wins.
	PublicTraffic bool `json:"public_traffic,omitempty"`
	// E2B makes the sandbox visible to the e2b gateway's API keys of its
	// namespace. The node decides it once, at claim, and ignores it in a
	// request: a claim is e2b's when its object carries the label
	// sandbox.cocoonstack.io/e2b "true" (every e2b create; a Kubernetes
	// Create whose object has the label, which takes `create sandboxes`,
	// whose holder gets the token anyway), a fork child inherits its
	// parent's, a snapshot records its source's (Snapshot.E2B) and a
	// sandbox claimed from a snapshot inherits the snapshot's. A later
	// label change (PUT .../labels) does not change it, so `patch
	// sandboxes` cannot hand someone else's sandbox to e2b.
	E2B bool `json:"e2b,omitempty"`
}

// PauseRequest is the optional body of POST /v1/sandboxes/{id}/pause.
type PauseRequest struct {
	// Memory false pauses without memory: the VM is stopped — its
	// processes end and its resources are freed — and its file system
	// kept; a resume restarts it from that file system. Absent or true
	// keeps memory (processes survive).
	Memory *bool `json:"memory,omitempty"`
}

// MaxObjectBytes bounds what a claim records of its Kubernetes object: the
// JSON encodings of labels, annotations and spec together. A node answers
// 413 beyond it.
const MaxObjectBytes = 16 << 10

// MaxManagedFieldsBytes bounds the recorded managed fields; 413 beyond.
const MaxManagedFieldsBytes = 32 << 10

// Bounds on a claim's Metadata (ClaimRequest.Metadata): it is stored with
// the claim, carried on the node's change stream and held by every API
// server replica, so a claim beyond either breaks a claim rule
// (ClaimRequest.Validate: the node's 413, e2b's 400; an empty key is a
// 400 everywhere), refused before anything is claimed.
const (
	// MaxMetadataBytes bounds the keys and values, summed (MetadataBytes).
	MaxMetadataBytes = 64 << 10
	// MaxMetadataKeys bounds the number of keys.
	MaxMetadataKeys = 1000
)

// MetadataBytes is the length counted against MaxMetadataBytes: the
// lengths of m's keys and values, summed.
func MetadataBytes(m map[string]string) int {
	n := 0
	for k, v := range m {
		n += len(k) + len(v)
	}
	return n
}

// Object is the part of a sandbox's Kubernetes object that a read cannot
// derive from the claim: the user's labels and annotations, the spec and
// the managed fields of server-side apply. The node records it with the
// claim (surviving restarts), returns it on every lookup and publishes the
// labels and annotations in its NodeInventory entry; spec and managed
// fields are opaque JSON to it.
type Object struct {
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	// Spec is the object's spec (a JSON object).
	Spec json.RawMessage `json:"spec,omitempty"`
	// ManagedFields is the object's metadata.managedFields (a JSON array).
	ManagedFields json.RawMessage `json:"managed_fields,omitempty"`
}

// Bytes is the length counted against MaxObjectBytes: the JSON encodings of
// labels and annotations plus the spec.
func (o *Object) Bytes() int {
	n := len(o.Spec)
	for _, m := range []map[string]string{o.Labels, o.Annotations} {
		if len(m) > 0 {
			b, _ := json.Marshal(m)
			n += len(b)
		}
	}
	return n
}

// LabelsRequest is the body of PUT /v1/sandboxes/{id}/labels: it replaces
// the recorded labels, annotations and managed fields (absent = none); the
// spec stays. A non-zero Version must equal the sandbox's current Version
// or the node answers 409 (optimistic concurrency).
type LabelsRequest struct {
	Labels        map[string]string `json:"labels,omitempty"`
	Annotations   map[string]string `json:"annotations,omitempty"`
	ManagedFields json.RawMessage   `json:"managed_fields,omitempty"`
	Version       int64             `json:"version,omitempty"`
}

// Key is the pool key the claim asks for: what the fleet routes on
// (Candidates) and what the node claims from.
func (r ClaimRequest) Key() pool.Key {
	return pool.Key{Template: r.Template, Net: r.Net, Size: r.Size}
}

// ClaimFor is a claim of a warm microVM of k's pool under ref ("" for
// none): what each front door's adapter starts from before it sets the
// lease, env, metadata, lifecycle and object.
func ClaimFor(k pool.Key, ref string) ClaimRequest {
	return ClaimRequest{Template: k.Template, Net: k.Net, Size: k.Size, ClaimRef: ref}
}

// Sandbox is the one record of a claimed sandbox: what a claim, a fork
// child and a snapshot claim deliver, what every lookup returns, what the
// fleet hands to both API surfaces and what a NodeInventory entry is
// converted from.
type Sandbox struct {
	// ID is the node-local claim id ("sb_…").
	ID string `json:"id"`
	// Node is the holding node's name.
	Node string `json:"node"`
	// NodeAddr is the holding node daemon's host:port (set by the fleet
	// to the address it reached the node at).
	NodeAddr string `json:"node_addr,omitempty"`
	Template string `json:"template"`
	Net      string `json:"net"`
	Size     string `json:"size"`
	// ClaimRef is "<namespace>/<name>"; empty for a snapshot claim.
	ClaimRef string `json:"claim_ref,omitempty"`
	// AgentAddr is the sandbox agent's host:port.
	AgentAddr string `json:"agent_addr"`
	// Token is the sandbox's own bearer token: in the answer of the claim
	// that delivered it and in root lookups by id, never in lists.
	Token string `json:"token,omitempty"`
	// Deadline is the end of the sandbox's lease.
	Deadline  time.Time         `json:"deadline"`
	ClaimedAt time.Time         `json:"claimed_at"`
	Paused    bool              `json:"paused"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	// Lifecycle is the claim's timeout behaviour.
	Lifecycle
	// Version counts the changes of the record (pause, resume, renew,
	// labels); PUT .../labels may be made conditional on it.
	Version int64 `json:"version,omitempty"`
	// Object is what the claim recorded of its Kubernetes object.
	Object
	// Egress is the egress policy the node enforces for it (ClaimRequest).
	Egress *egress.Policy `json:"egress,omitempty"`
	// Events are the sandbox's last lifecycle events, oldest first (at
	// most MaxSandboxEvents): only in the answer of a lookup (GET
	// /v1/sandboxes/{id}, GET /v1/sandboxes?claim_ref=), never in the
	// whole list, claims' answers or the change stream, so they cost the
	// claim path and the fleet view nothing.
	Events []Event `json:"events,omitempty"`
}

// MaxSandboxEvents is how many lifecycle events a node keeps per sandbox
// (Sandbox.Events): the oldest is dropped past it.
const MaxSandboxEvents = 16

// Event types (Event.Type), Kubernetes' own.
const (
	EventNormal  = "Normal"
	EventWarning = "Warning"
)

// EventsController is the reportingController of a sandbox's events: its
// node records them, and writes all but Claimed to the Kubernetes API as
// events.k8s.io/v1 Events when it has a client (sandboxd --kubeconfig or
// --publish-in-cluster).
const EventsController = "hearth.dev/sandboxd"

// Event reasons a node records (Event.Reason).
const (
	// ReasonClaimed: the sandbox was claimed (from a warm pool, a fork or
	// a snapshot; the message says which).
	ReasonClaimed = "Claimed"
	// ReasonForked: the sandbox was forked (the message names the children).
	ReasonForked = "Forked"
	// ReasonSnapshotTaken: a snapshot of the sandbox was taken.
	ReasonSnapshotTaken = "SnapshotTaken"
	ReasonPaused        = "Paused"
	ReasonResumed       = "Resumed"
	// ReasonLeaseExpired: the lease ended and the sandbox was paused
	// (on_timeout pause); a sandbox whose lease end destroys it has no
	// record left to show it.
	ReasonLeaseExpired = "LeaseExpired"
	// ReasonRestored (Warning): its agent died and the node restored it.
	ReasonRestored = "Restored"
	// ReasonRestoreFailed (Warning): a restore failed; the node retries.
	ReasonRestoreFailed = "RestoreFailed"
	// ReasonOOMKilled (Warning): the kernel's OOM killer killed processes
	// of the sandbox that took it past its size class's memory (the
	// message counts them); read by the node's health sweep from drivers
	// that count them (vmm.OOMCounter: sim).
	ReasonOOMKilled = "OOMKilled"
)

// Event is one lifecycle event of a sandbox as its node records it; a
// repeat of the newest one (same type, reason and message) counts on it
// (Count, LastTime) instead of taking a place.
type Event struct {
	// Type is EventNormal or EventWarning.
	Type string `json:"type"`
	// Reason is UpperCamelCase (the Reason* constants).
	Reason    string    `json:"reason"`
	Message   string    `json:"message,omitempty"`
	FirstTime time.Time `json:"first_time"`
	LastTime  time.Time `json:"last_time"`
	Count     int32     `json:"count"`
}

// Key is the sandbox's pool key.
func (s *Sandbox) Key() pool.Key {
	return pool.Key{Template: s.Template, Net: s.Net, Size: s.Size}
}

// SandboxList is the body of GET /v1/sandboxes.
type SandboxList struct {
	Sandboxes []Sandbox `json:"sandboxes"`
}

// PoolSpec is one warm target in PUT /v1/pools.
type PoolSpec struct {
	Template string `json:"template"`
	Net      string `json:"net,omitempty"`
	Size     string `json:"size,omitempty"`
	Warm     int32  `json:"warm"`
	// Egress is the pool's egress policy (a SandboxTemplate's
	// networkPolicy, egress.FromTemplate): every sandbox claimed from the
	// pool is held to it, and to its claim's own (ClaimRequest.Egress) as
	// well — a packet leaves only if both allow it. The node installs it
	// as each warm VM boots, off the claim path. A change of a pool's
	// policy replaces its warm VMs.
	Egress *egress.Policy `json:"egress,omitempty"`
}

// PoolsRequest is the body of PUT /v1/pools: the whole set; a pool left out drains.
type PoolsRequest struct {
	Pools []PoolSpec `json:"pools"`
}

// PoolInfo is one pool in /v1/info.
type PoolInfo struct {
	Template  string `json:"template"`
	Net       string `json:"net"`
	Size      string `json:"size"`
	Warm      int32  `json:"warm"`
	Target    int32  `json:"target"`
	Refilling int32  `json:"refilling"`
	// BootFailures counts the pool's warm boots that failed in a row (0
	// once one succeeds); BootError is the last failure's error (at most
	// MaxBootErrorBytes), empty once a boot succeeds. A pool whose image
	// cannot be pulled shows it here; the warm-pool controller turns it
	// into a BootFailed event on the SandboxWarmPool and its template.
	BootFailures int32  `json:"boot_failures,omitempty"`
	BootError    string `json:"boot_error,omitempty"`
	// Evicted counts the pool's warm microVMs the health sweep evicted
	// (their agent failed twice, or their VM was gone) since the node
	// started.
	Evicted int64 `json:"evicted,omitempty"`
}

// MaxBootErrorBytes bounds PoolInfo.BootError.
const MaxBootErrorBytes = 1024

// Info is the body of GET /v1/info (and the answer of PUT /v1/pools).
type Info struct {
	Node string `json:"node"`
	// NodeAddr is the node daemon's advertised host:port.
	NodeAddr string `json:"node_addr"`
	VMM      string `json:"vmm"`
	// Accel names the hardware acceleration in use ("kvm", "tcg", "none").
	Accel   string     `json:"accel,omitempty"`
	Pools   []PoolInfo `json:"pools"`
	Claimed int        `json:"claimed"`
	Paused  int        `json:"paused"`
	// LeaseDefaultSeconds is the lease a claim asking for none gets
	// (sandboxd --default-lease); LeaseMaxSeconds the longest the node
	// grants (--max-lease; 0: unbounded), a longer ask being clamped to
	// it. Gateways take their lease bounds from here (the e2b API's
	// default and largest timeout). 0 from a node that predates them.
	LeaseDefaultSeconds int64 `json:"lease_default_seconds,omitempty"`
	LeaseMaxSeconds     int64 `json:"lease_max_seconds,omitempty"`
}

// MaxForkCount is the most children one fork makes (ForkRequest.Count is
// 1 to MaxForkCount): the node answers more with a 400, and every surface
// (the Kubernetes fork subresource, the e2b API) refuses more itself with
// a 400 naming it, before any node call. It is the one place the bound
// lives.
const MaxForkCount = 16

// ForkRequest is the body of POST /v1/sandboxes/{id}/fork.
type ForkRequest struct {
	Count      int   `json:"count"`
	TTLSeconds int64 `json:"ttl_seconds,omitempty"`
}

// ForkResult lists the children of a fork (all or nothing).
type ForkResult struct {
	Children []Sandbox `json:"children"`
}

// SnapshotRequest is the body of POST /v1/sandboxes/{id}/snapshot.
type SnapshotRequest struct {
	Name string `json:"name,omitempty"`
	// Keep keeps the snapshot after its sandbox is released. Unset, a
	// root caller's snapshot is kept and a sandbox token's is removed
	// with its sandbox; only root may set it true (403 otherwise).
	Keep *bool `json:"keep,omitempty"`
}

// Snapshot describes a snapshot of a sandbox.
type Snapshot struct {
	ID        string    `json:"id"`
	Name      string    `json:"name,omitempty"`
	SandboxID string    `json:"sandbox_id"`
	Key       pool.Key  `json:"key"`
	CreatedAt time.Time `json:"created_at"`
	Node      string    `json:"node,omitempty"`
	// Namespace is the namespace of the claim the snapshot was taken from
	// ("default" for a claim without a ref); API surfaces scope by it.
	Namespace string `json:"namespace,omitempty"`
	// E2B is the source sandbox's Lifecycle.E2B when the snapshot was
	// taken: the e2b gateway lists, clones and deletes only such
	// snapshots, and a sandbox claimed from it inherits it.
	E2B bool `json:"e2b,omitempty"`
	// Kept says the snapshot outlives its sandbox (see SnapshotRequest.Keep
	// and POST /v1/snapshots/{id}/promote).
	Kept bool `json:"kept,omitempty"`
	// Bytes is the snapshot's size on disk.
	Bytes int64 `json:"bytes,omitempty"`
}

// SnapshotResult is the answer of POST /v1/sandboxes/{id}/snapshot.
type SnapshotResult struct {
	Snapshot Snapshot `json:"snapshot"`
}

// SnapshotList is the body of GET /v1/snapshots, newest first.
type SnapshotList struct {
	Snapshots []Snapshot `json:"snapshots"`
}

// SnapshotClaimRequest is the body of POST /v1/snapshots/{id}/claim.
type SnapshotClaimRequest struct {
	TTLSeconds int64 `json:"ttl_seconds,omitempty"`
	// ClaimRef names the new sandbox "<namespace>/<name>", unique like a
	// claim's (409 when held); empty leaves it unnamed.
	ClaimRef string `json:"claim_ref,omitempty"`
	// Metadata is recorded with the new sandbox and carried on the change
	// stream, as a claim's (ClaimRequest.Metadata, with its bounds).
	Metadata map[string]string `json:"metadata,omitempty"`
	// Lifecycle is the new sandbox's timeout behaviour, as for a claim.
	Lifecycle
}

// RenewRequest is the body of POST /v1/sandboxes/{id}/renew.
type RenewRequest struct {
	TTLSeconds int64 `json:"ttl_seconds"`
}

// RenewResult carries the lease's new deadline.
type RenewResult struct {
	Deadline time.Time `json:"deadline"`
}

// Stats is the body of GET /v1/sandboxes/{id}/stats.
type Stats struct {
	ID            string `json:"id"`
	CPUCount      int    `json:"cpu_count"`
	MemTotalBytes int64  `json:"mem_total_bytes"`
	MemUsedBytes  int64  `json:"mem_used_bytes"`
	// MemUsedMeasured is false when the VM is paused or not measurable.
	MemUsedMeasured bool `json:"mem_used_measured"`
	// RSS, private and shared bytes of the VM's process(es), from smaps.
	RSSBytes     int64   `json:"rss_bytes,omitempty"`
	PrivateBytes int64   `json:"private_bytes,omitempty"`
	SharedBytes  int64   `json:"shared_bytes,omitempty"`
	CPUSeconds   float64 `json:"cpu_seconds,omitempty"`
	// CPURateCores is the CPU the VM used per second of the
	// CPURateWindowSeconds before MeasuredAt, in cores: the CPUSeconds
	// between the node's previous measurement of the sandbox (for any
	// caller) at least 1 s and at most 60 s earlier and this one. Absent
	// without such a measurement (ask again a second later), for a paused
	// sandbox and when CPUSeconds is not measured.
	CPURateCores         *float64 `json:"cpu_rate_cores,omitempty"`
	CPURateWindowSeconds float64  `json:"cpu_rate_window_seconds,omitempty"`
	// DiskTotalBytes and DiskUsedBytes are the sandbox's disk (its
	// writable root file system: the node's --disk-size) and the bytes in
	// use on it, from its file system; 0 when the backend cannot tell.
	DiskTotalBytes int64     `json:"disk_total_bytes,omitempty"`
	DiskUsedBytes  int64     `json:"disk_used_bytes,omitempty"`
	MeasuredAt     time.Time `json:"measured_at"`
	Paused         bool      `json:"paused"`
}

// Error is every error body.
type Error struct {
	Error string `json:"error"`
}

// DNSName is a claim id as a DNS-1123 label ("sb_1a2b" → "sb-1a2b"): the
// name of a sandbox that has no claim ref.
func DNSName(id string) string { return strings.ReplaceAll(id, "_", "-") }
