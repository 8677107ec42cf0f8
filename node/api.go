package node

import (
	"time"

	"github.com/hearthvm/hearth/vmm"
)

// Wire types of the node HTTP API (CONTRACT §3). JSON field names are the
// contract; do not rename them.

// ClaimRequest is the body of POST /v1/claim.
type ClaimRequest struct {
	Template   string `json:"template"`
	Net        string `json:"net,omitempty"`
	Size       string `json:"size,omitempty"`
	TTLSeconds int64  `json:"ttl_seconds,omitempty"`
	// ClaimRef is "<namespace>/<name>"; lookups by name use it.
	ClaimRef string `json:"claim_ref,omitempty"`
	// Env is applied to the guest's process environment.
	Env map[string]string `json:"env,omitempty"`
	// Metadata is kept with the sandbox and returned by lookups.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// ClaimResult is what a claim (or fork child, or checkpoint branch) delivers.
type ClaimResult struct {
	ID    string `json:"id"`
	Token string `json:"token"`
	// Deadline is the granted lease expiry.
	Deadline time.Time `json:"deadline"`
	// OwnerAddr is the sandbox agent's host:port.
	OwnerAddr string    `json:"owner_addr"`
	ClaimedAt time.Time `json:"claimed_at"`
	// Node is the delivering node's name.
	Node     string `json:"node,omitempty"`
	ClaimRef string `json:"claim_ref,omitempty"`
	Template string `json:"template,omitempty"`
}

// Sandbox is one row of the node's claim table (lookups and the index).
type Sandbox struct {
	ID         string            `json:"id"`
	Template   string            `json:"template"`
	Net        string            `json:"net"`
	Size       string            `json:"size"`
	ClaimRef   string            `json:"claim_ref,omitempty"`
	Addr       string            `json:"addr"`
	Deadline   time.Time         `json:"deadline"`
	ClaimedAt  time.Time         `json:"claimed_at"`
	Hibernated bool              `json:"hibernated"`
	Metadata   map[string]string `json:"metadata,omitempty"`
	// Token is returned only to root callers.
	Token string `json:"token,omitempty"`
	// Node is the holding node's name.
	Node string `json:"node,omitempty"`
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
}

// Info is the body of GET /v1/info (and the answer of PUT /v1/pools).
type Info struct {
	Node    string `json:"node"`
	Address string `json:"address"`
	VMM     string `json:"vmm"`
	// Accel names the hardware acceleration in use ("kvm", "tcg", "none").
	Accel      string     `json:"accel,omitempty"`
	Pools      []PoolInfo `json:"pools"`
	Claimed    int        `json:"claimed"`
	Hibernated int        `json:"hibernated"`
}

// ForkRequest is the body of POST /v1/sandboxes/{id}/fork.
type ForkRequest struct {
	Count      int   `json:"count"`
	TTLSeconds int64 `json:"ttl_seconds,omitempty"`
}

// ForkResult lists the children of a fork (all or nothing).
type ForkResult struct {
	Children []ClaimResult `json:"children"`
}

// CheckpointRequest is the body of POST /v1/sandboxes/{id}/checkpoint.
type CheckpointRequest struct {
	Name string `json:"name,omitempty"`
}

// Key is a pool key on the wire.
type Key struct {
	Template string `json:"template"`
	Net      string `json:"net"`
	Size     string `json:"size"`
}

// Checkpoint describes a snapshot of a sandbox.
type Checkpoint struct {
	ID        string    `json:"id"`
	Name      string    `json:"name,omitempty"`
	SandboxID string    `json:"sandbox_id"`
	Key       Key       `json:"key"`
	CreatedAt time.Time `json:"created_at"`
	Node      string    `json:"node,omitempty"`
}

// CheckpointResult is the answer of a checkpoint.
type CheckpointResult struct {
	Checkpoint Checkpoint `json:"checkpoint"`
}

// CheckpointList is the body of GET /v1/checkpoints, newest first.
type CheckpointList struct {
	Checkpoints []Checkpoint `json:"checkpoints"`
}

// BranchRequest is the body of POST /v1/checkpoints/{id}/claim.
type BranchRequest struct {
	TTLSeconds int64 `json:"ttl_seconds,omitempty"`
}

// RenewRequest is the body of POST /v1/sandboxes/{id}/renew.
type RenewRequest struct {
	TTLSeconds int64 `json:"ttl_seconds"`
}

// RenewResult carries the new deadline.
type RenewResult struct {
	Deadline time.Time `json:"deadline"`
}

// Stats is the body of GET /v1/sandboxes/{id}/stats.
type Stats struct {
	ID string `json:"id"`
	vmm.Stats
	Hibernated bool `json:"hibernated"`
}

// Error is every error body.
type Error struct {
	Error string `json:"error"`
}
