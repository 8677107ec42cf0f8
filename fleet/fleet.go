package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
)

// ErrNoWarmCapacity means no node could deliver a warm microVM for the key
// (HTTP 503, retryable).
type ErrNoWarmCapacity struct {
	Key pool.Key
	// Last is the last node's refusal, if any node was asked. It is not
	// unwrapped: the error as a whole is a 503, whatever the nodes said.
	Last error
}

func (e *ErrNoWarmCapacity) Error() string {
	return fmt.Sprintf("no warm sandbox available for pool (%s); retry as warm capacity refills", e.Key)
}

// ErrNotFound is every not-found the fleet returns (HTTP 404): no node
// holds the sandbox or snapshot, or the node asked answered 404.
var ErrNotFound = errors.New("not found")

// Fleet is what the API surfaces (the aggregated API and the e2b gateway)
// get from the nodes. Every sandbox is the one record nodeapi.Sandbox, with
// Node and NodeAddr set. Lookups never wait for an inventory publish: the
// claim-time index answers first (a claim made through this fleet is
// visible at once), a miss falls back to the view, then to asking nodes
// live. Every not-found is ErrNotFound; HTTPStatus maps every error.
//
// Consumers declare the subset they use as their own interface.
type Fleet interface {
	// Claim routes a claim to a warm node of req.Key()'s pool and indexes
	// the delivery.
	Claim(ctx context.Context, req nodeapi.ClaimRequest) (nodeapi.Sandbox, error)
	// ByRef finds the sandbox recorded under "<ns>/<name>" (index, view, nodes).
	ByRef(ctx context.Context, ref string) (nodeapi.Sandbox, error)
	// ByID finds a sandbox by claim id (index, view, nodes).
	ByID(ctx context.Context, id string) (nodeapi.Sandbox, error)
	// LiveByRef asks the nodes only, ignoring the published view.
	LiveByRef(ctx context.Context, ref string) (nodeapi.Sandbox, error)
	// LiveByID asks the nodes only, ignoring the published view.
	LiveByID(ctx context.Context, id string) (nodeapi.Sandbox, error)
	// KnownByID asks only the node the claim-time index or the view names
	// for id: at most one node call, never a fan-out.
	KnownByID(ctx context.Context, id string) (nodeapi.Sandbox, error)
	// Held reports the live sandbox the claim-time index or the view names
	// for ref, verified with its one node; it never asks every node.
	Held(ctx context.Context, ref string) (nodeapi.Sandbox, bool)
	// AllByRef asks every node for every sandbox recorded under ref.
	AllByRef(ctx context.Context, ref string) ([]nodeapi.Sandbox, error)
	// SetLabels replaces s's recorded labels, annotations and managed fields.
	SetLabels(ctx context.Context, s nodeapi.Sandbox, req nodeapi.LabelsRequest) (nodeapi.Sandbox, error)
	// List returns every sandbox the view knows plus the claims indexed
	// here that are not published yet (verified live).
	List(ctx context.Context) ([]nodeapi.Sandbox, error)
	// Pools returns the warm pools every node advertises.
	Pools(ctx context.Context) ([]nodeapi.PoolInfo, error)
	Release(ctx context.Context, s nodeapi.Sandbox) error
	Pause(ctx context.Context, s nodeapi.Sandbox) error
	// PauseWithoutMemory pauses s keeping only its file system
	// (nodeapi.PauseRequest).
	PauseWithoutMemory(ctx context.Context, s nodeapi.Sandbox) error
	Resume(ctx context.Context, s nodeapi.Sandbox) error
	Fork(ctx context.Context, s nodeapi.Sandbox, count int, ttlSeconds int64) ([]nodeapi.Sandbox, error)
	Snapshot(ctx context.Context, s nodeapi.Sandbox, name string) (nodeapi.Snapshot, error)
	// Snapshots lists every node's snapshots, newest first.
	Snapshots(ctx context.Context) ([]nodeapi.Snapshot, error)
	// DeleteSnapshot deletes a snapshot wherever it is; ErrNotFound if nowhere.
	DeleteSnapshot(ctx context.Context, id string) error
	// ClaimSnapshot claims a sandbox cloned from snap on the node holding
	// it, recorded under req.ClaimRef, and indexes the delivery.
	ClaimSnapshot(ctx context.Context, snap nodeapi.Snapshot, req nodeapi.ClaimRequest) (nodeapi.Sandbox, error)
	// Renew sets s's lease to ttlSeconds from now and returns its new deadline.
	Renew(ctx context.Context, s nodeapi.Sandbox, ttlSeconds int64) (time.Time, error)
	Stats(ctx context.Context, s nodeapi.Sandbox) (nodeapi.Stats, error)
	// Logs reads s's log from its node (nodeapi.Client.Logs).
	Logs(ctx context.Context, s nodeapi.Sandbox, q agentapi.LogsQuery) (agentapi.Logs, error)
	// LeaseBounds are the nodes' lease bounds, the strictest of them.
	LeaseBounds(ctx context.Context) (defaultSeconds, maxSeconds int64, err error)
}

// ErrOutcomeUnknown is a claim the node may or may not have delivered:
// the request reached it and no answer came back (the connection broke,
// or the deadline passed). HTTP 503 (504 when the deadline passed),
// retryable: the fleet remembers the name and node (see ErrClaimInDoubt),
// so a retry of the same name answers 409 if the first claim landed and is
// never delivered a second microVM on another node.
type ErrOutcomeUnknown struct {
	Ref, Node string
	Err       error
}

func (e *ErrOutcomeUnknown) Error() string {
	return fmt.Sprintf("the claim sent to node %s got no answer (%v); it may have been delivered: retry, a retry of the same name answers 409 if it was", e.Node, e.Err)
}

func (e *ErrOutcomeUnknown) Unwrap() error { return e.Err }

// ErrClaimInDoubt refuses a claim of a name whose earlier claim through
// this fleet has an unknown outcome (ErrOutcomeUnknown) while the node it
// was sent to does not answer whether it holds the name: claiming it on
// another node could make the name live twice. HTTP 503, retryable.
type ErrClaimInDoubt struct {
	Ref, Node string
	Err       error
}

func (e *ErrClaimInDoubt) Error() string {
	return fmt.Sprintf("an earlier claim of %s sent to node %s has an unknown outcome and the node does not answer (%v); retry once it does", e.Ref, e.Node, e.Err)
}

func (e *ErrClaimInDoubt) Unwrap() error { return e.Err }
