// Package vmm defines the microVM driver interface every backend implements
// (sim, qemu, firecracker, cloudhypervisor) and the types that cross it.
//
// A Driver owns processes and files under its root directory and nothing
// else: it never decides which VM is warm or claimed (that is the node's
// job). Every backend boots the same in-guest agent (package agent), reachable
// from the node at Handle.Addr and guarded by Handle.Token.
//
// Handles are plain data, persisted by the node and handed back to Restore
// after a node restart, so a driver must be able to re-derive everything it
// needs from a Handle (and the files under Handle.Dir).
package vmm

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/hearthvm/hearth/egress"
)

// Spec describes a microVM to boot or clone.
type Spec struct {
	// ID names the VM; unique on the node, safe as a path element.
	ID string
	// Template is the pool template (image reference) the VM is for.
	Template string
	// Net is the lane: "none" or "egress".
	Net string
	// Size is the size class: "small", "medium" or "large". It sets the
	// VM's CPUs and memory; its disk (the writable root file system) is
	// the driver's disk size for every class (Options.DiskBytes of sim
	// and qemu, default DefaultDiskBytes), and a clone keeps the disk size
	// of its checkpoint.
	Size string
	// Token is the agent's access token (the sandbox token).
	Token string
	// Env is extra environment for the guest's processes.
	Env map[string]string
	// Egress is the pool's egress policy (nodeapi.PoolSpec.Egress), which
	// an EgressEnforcer installs as the VM boots; a claim's own policy
	// (SetEgress) holds in addition to it.
	Egress *egress.Policy
	// ClaimEgress is, for a Clone that becomes a claimed sandbox (a
	// fork's child, a snapshot claim's), that sandbox's own policy: an
	// EgressEnforcer whose clones resume their checkpoint's running guest
	// (qemu: the agent open, the tenant's processes running — no hold
	// covers them) installs it with Egress before the guest runs, as
	// SetEgress would; the node's SetEgress after the clone changes
	// nothing then. A driver whose clones boot held (sim) may leave it to
	// SetEgress. Boot ignores it.
	ClaimEgress *egress.Policy
	// Hold boots the agent holding every request but the node's until
	// the node opens it (agentapi.OpenPath, agent.Options.Hold): the node
	// asks it of the VMs of a lane where a claim's egress policy is
	// enforced after the claim is answered. A clone's agent is in the
	// state its checkpoint holds (memory) or, where a clone boots (sim), holds
	// as Hold says; either way the handle records Hold, and the agent of
	// a VM started again from its disk holds again.
	Hold bool
}

// Handle identifies a running (or stopped) VM. It is persisted by the node.
type Handle struct {
	ID      string `json:"id"`
	Backend string `json:"backend"`
	// Dir is the VM's run directory, owned by the driver.
	Dir string `json:"dir"`
	// PID is the VMM (or guest, for sim) process id; 0 when stopped.
	PID int `json:"pid,omitempty"`
	// Addr is the host:port where the node reaches the in-guest agent.
	Addr string `json:"addr"`
	// Token is the agent's access token.
	Token string `json:"token"`
	// Paused is true while the VM is paused.
	Paused bool `json:"paused,omitempty"`
	// Hold is Spec.Hold: the VM's agent holds requests until the node
	// opens it, at each boot (a Restore that starts it again included).
	Hold bool `json:"hold,omitempty"`
	// Meta carries backend-specific identity (sockets, CIDs, MACs).
	Meta map[string]string `json:"meta,omitempty"`
}

// Disk sizes: a VM's disk is its writable root file system, of the node's
// disk size (sandboxd and sandbox-dev --disk-size) for every size class.
const (
	// DefaultDiskBytes is the disk size when the node sets none: e2b's
	// 10 GiB.
	DefaultDiskBytes = 10 << 30
	// MinDiskBytes is the smallest disk size (ext4 and its journal).
	MinDiskBytes = 16 << 20
)

// Stats are a VM's resource figures.
type Stats struct {
	CPUCount      int   `json:"cpu_count"`
	MemTotalBytes int64 `json:"mem_total_bytes"`
	MemUsedBytes  int64 `json:"mem_used_bytes"`
	// MemUsedMeasured is false when the VM is paused or not measurable.
	MemUsedMeasured bool `json:"mem_used_measured"`
	// RSS, private and shared bytes of the VM's process(es), from smaps.
	RSSBytes     int64   `json:"rss_bytes,omitempty"`
	PrivateBytes int64   `json:"private_bytes,omitempty"`
	SharedBytes  int64   `json:"shared_bytes,omitempty"`
	CPUSeconds   float64 `json:"cpu_seconds,omitempty"`
	// DiskTotalBytes and DiskUsedBytes are the size of the VM's writable
	// disk and the bytes in use on it, from its file system (statfs), or
	// 0 when the backend cannot tell.
	DiskTotalBytes int64     `json:"disk_total_bytes,omitempty"`
	DiskUsedBytes  int64     `json:"disk_used_bytes,omitempty"`
	MeasuredAt     time.Time `json:"measured_at"`
}

// Driver is one VMM backend. Methods are safe for concurrent use on
// different handles. Pause and Resume are idempotent.
type Driver interface {
	// Name is the backend id: "sim", "qemu", "firecracker", "cloud-hypervisor".
	Name() string
	// Boot cold-boots a VM and returns once its agent answers.
	Boot(ctx context.Context, spec Spec) (Handle, error)
	// Pause stops the VM's vCPUs (the process stays).
	Pause(ctx context.Context, h Handle) (Handle, error)
	// Resume undoes Pause.
	Resume(ctx context.Context, h Handle) (Handle, error)
	// Snapshot writes a checkpoint of h (memory, devices, disk) into dir,
	// which must not exist. The VM is left in the state it had. When ctx
	// carries a byte bound (WithSnapshotLimit), a driver that honours it
	// stops writing once the checkpoint would take more of the host's
	// disk, removes what it wrote and fails with ErrSnapshotTooLarge
	// (sim and qemu do; a caller still measures the result).
	Snapshot(ctx context.Context, h Handle, dir string) error
	// Clone starts a new VM from the checkpoint in dir with the fresh
	// identity of spec (ID, token, address) and returns once its agent
	// answers. The checkpoint stays usable for further clones.
	Clone(ctx context.Context, dir string, spec Spec) (Handle, error)
	// Stop persists h's state under h.Dir and ends its processes, so that
	// Restore can bring it back (used on orderly node shutdown).
	Stop(ctx context.Context, h Handle) (Handle, error)
	// Restore re-attaches to h if its processes still run (node restart
	// after a crash) or restarts it from the state Stop left. The returned
	// handle may carry a new PID and Addr.
	Restore(ctx context.Context, h Handle) (Handle, error)
	// Destroy ends h's processes and removes h.Dir. Destroying a VM that is
	// already gone succeeds.
	Destroy(ctx context.Context, h Handle) error
	// Stats measures h.
	Stats(ctx context.Context, h Handle) (Stats, error)
	// List returns every VM with a live process under the driver's root,
	// so a restarted node can destroy the ones it does not own.
	List(ctx context.Context) ([]Handle, error)
}

// Shutdowner is implemented by drivers whose Stop keeps a VM's memory
// (qemu's checkpoints it). Shutdown ends h's processes keeping only its
// disk, flushed by the guest first; Restore then boots the VM again from
// that disk: a new boot (a new kernel boot id), no process survives. The
// node pauses without memory through Shutdown, or through Stop on a driver
// without it (sim's Stop keeps only the disk: its Restore is a new boot).
type Shutdowner interface {
	Shutdown(ctx context.Context, h Handle) (Handle, error)
}

// PortDialer is implemented by drivers that can connect the node to any TCP
// port of a guest (127.0.0.1:port inside the VM), e.g. to route e2b's
// host-based URLs to sandbox ports. Handle.Addr stays the way to the agent.
type PortDialer interface {
	Dial(ctx context.Context, h Handle, port int) (net.Conn, error)
}

// EgressEnforcer is a Driver that enforces an egress policy on a VM of
// the egress lane from outside the guest: a packet filter the node owns
// (package egress/nft) and the node's resolver for the guest
// (egress/resolver). SetEgress makes h enforce p (nil: no policy) before
// it returns; it is idempotent. A policy survives Pause and Resume; after
// a Restore (re-attached or restarted) and for a Clone the node calls it
// again with the policy it recorded. A VM of the lane "none" has no
// network: SetEgress accepts any policy for it and has nothing to do.
type EgressEnforcer interface {
	SetEgress(ctx context.Context, h Handle, p *egress.Policy) error
}

// EgressChecker is an EgressEnforcer that can tell, without changing
// anything, whether SetEgress would refuse p on a VM of the egress lane:
// CheckEgress returns SetEgress's error for a policy it cannot enforce
// (vmm.ErrUnsupported for a rule of it, an invalid policy) and nil for
// one it would install. A node answers a claim on a held VM (Spec.Hold)
// once the policy passes this check and enforces it after.
type EgressChecker interface {
	CheckEgress(p *egress.Policy) error
}

// OOMCounter is a Driver that counts the processes the kernel's OOM
// killer killed in a VM because it ran out of its memory limit (the size
// class's memory): OOMKills returns the count since the VM's processes
// started (its cgroup's or its guest kernel's oom_kill counter), which
// never decreases while they run and starts again from 0 when a Restore
// restarts them. A driver that cannot read it for h returns an error
// (ErrNotRunning when h is gone). The node's health sweep reads it for
// every claimed, non-paused sandbox and records an OOMKilled event when
// it grew.
type OOMCounter interface {
	OOMKills(ctx context.Context, h Handle) (uint64, error)
}

// Errors a driver returns (wrapped).
var (
	ErrNotRunning      = errors.New("vm is not running")
	ErrUnsupported     = errors.New("operation not supported by this backend")
	ErrSnapshotInvalid = errors.New("checkpoint is invalid")
	ErrVMMExited       = errors.New("vmm process exited")
	// ErrSnapshotTooLarge: the checkpoint would pass the byte bound of
	// WithSnapshotLimit; nothing of it is left.
	ErrSnapshotTooLarge = errors.New("checkpoint exceeds the bytes allowed")
)

type snapshotLimitKey struct{}

// WithSnapshotLimit returns ctx carrying the most bytes a Snapshot made
// with it may write to the host's disk (the node's remaining snapshot
// budget). A negative bound is none.
func WithSnapshotLimit(ctx context.Context, maxBytes int64) context.Context {
	return context.WithValue(ctx, snapshotLimitKey{}, maxBytes)
}

// SnapshotLimit is the bound of WithSnapshotLimit, or -1 without one.
func SnapshotLimit(ctx context.Context) int64 {
	if n, ok := ctx.Value(snapshotLimitKey{}).(int64); ok && n >= 0 {
		return n
	}
	return -1
}
