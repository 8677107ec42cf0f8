package claim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hearthvm/hearth/node"
	"github.com/hearthvm/hearth/pool"
)

// Request is a fleet-level claim: the key and lease of CONTRACT §1–§2.
type Request struct {
	Key pool.Key
	// TTLSeconds is the asked lease; 0 asks for the node default.
	TTLSeconds int64
	// Ref is "<namespace>/<name>"; empty for claims without a name.
	Ref string
	// Env is applied to the guest's processes; Metadata is kept with the sandbox.
	Env, Metadata map[string]string
}

// Located is a sandbox together with the node that holds it.
type Located struct {
	node.Sandbox
	// Node is the holding node's name; NodeAddr its daemon address.
	Node, NodeAddr string
}

// Delivery is what a claim, fork or branch delivered.
type Delivery struct {
	node.ClaimResult
	Node, NodeAddr string
}

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

// ErrNotFound means no node holds the sandbox (HTTP 404).
var ErrNotFound = errors.New("sandbox not found")

// Fleet is what the API surfaces (the aggregated API and the e2b gateway)
// need from the nodes. Lookups by ref or id never wait for an inventory
// publish: a miss in the view falls back to asking nodes live.
// Errors from a node keep their status (node.StatusOf) so surfaces map
// 404/409 through.
type Fleet interface {
	Claim(ctx context.Context, req Request) (Delivery, error)
	// ByRef finds the sandbox recorded under "<ns>/<name>".
	ByRef(ctx context.Context, ref string) (Located, error)
	// ByID finds a sandbox by claim id.
	ByID(ctx context.Context, id string) (Located, error)
	// List returns every sandbox the view (NodeInventory) knows.
	List(ctx context.Context) ([]Located, error)
	Release(ctx context.Context, s Located) error
	Hibernate(ctx context.Context, s Located) error
	Wake(ctx context.Context, s Located) error
	Fork(ctx context.Context, s Located, count int, ttlSeconds int64) ([]Delivery, error)
	Checkpoint(ctx context.Context, s Located, name string) (node.Checkpoint, error)
	// Checkpoints lists every node's checkpoints.
	Checkpoints(ctx context.Context) ([]node.Checkpoint, error)
	// DeleteCheckpoint deletes a checkpoint wherever it is; ErrNotFound if nowhere.
	DeleteCheckpoint(ctx context.Context, id string) error
	Renew(ctx context.Context, s Located, ttlSeconds int64) (time.Time, error)
	Stats(ctx context.Context, s Located) (node.Stats, error)
}
