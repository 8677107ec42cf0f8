// Package fleet is the API surfaces' one way to the nodes: it routes a
// claim to a warm node (power of two choices over the view's advertised
// capacity, see Route), finds sandboxes by name or claim id without waiting
// for a publish (its claim-time index — a claim made here is found before
// its node's stream delivers it —, the live fleet view — Config.View, a
// *fleetview.Live, required: the one read model, which also gives the
// nodes to route to —, then the nodes live), acts
// on a sandbox through its owning node, and maps every error to one HTTP
// status (HTTPStatus). Every sandbox it returns is the one record
// nodeapi.Sandbox, located (Node, NodeAddr) and with defaults set once here.
//
// A claim is nodeapi.ClaimRequest, the node's own request and the one
// request type of every front door (a Kubernetes Create, an e2b create, a
// SandboxClaim): each builds one with nodeapi.ClaimFor, and Claim routes
// it on its Key() (normalized) and sends it to the chosen node as it is.
//
// The view says which node holds a sandbox; that node's record is the
// truth. A lookup (ByRef, ByID) asks the node the index or the view names
// and returns its record — spec, managed fields, labels, annotations and
// metadata as the create stored them —, the same on every replica and
// after any restart; only a node that does not answer leaves the view's
// entry. List reads the view, whose entries carry labels, annotations and
// the claims' metadata from the nodes' streams, so its filters see them on
// every replica.
//
// # Names
//
// A name ("<ns>/<name>", the claim ref) is unique per node by the node's
// own atomic check (a second claim is its 409), and across nodes by the
// check an API surface makes before claiming (Held: the claim-time index,
// else the view, each verified with the one node it names). One race is
// left: two API server replicas claiming one name on two different nodes
// before either's view has the other's claim (milliseconds, the change
// stream's latency).
// Both claims then live; a read by name shows the newest, and Delete by
// name (AllByRef) releases every one, so nothing leaks past a delete. Closing it would need a write per claim to
// a shared store, which Hearth deliberately does not make.
//
// A claim sent to a node that never answers (killed mid-request, a broken
// connection, a deadline) may or may not have been delivered: it is
// ErrOutcomeUnknown (503; 504 for a deadline), and the fleet keeps the name
// in doubt. The next claim of that name through the same fleet first asks
// that node: its 409 if it holds the name, a claim as usual if it does not,
// ErrClaimInDoubt (503) while it does not answer — so a client retrying a
// create is never handed a second microVM for one name on another node.
//
// It also owns the lease a Create asks for (LeaseFor, ParseTTL): pure
// functions of their inputs and a clock value, with typed errors
// (*LeaseError, HTTP 400) returned before any warm microVM is spent.
//
// Credentials: a node is sent only its own token,
// nodeapi.NodeToken(Config.Secret, node name), keyed by the name the view
// gives it, so the address a NodeInventory publishes can never obtain the
// fleet secret or a token another node accepts; a node seen at a new
// address is logged.
//
// It speaks to nodes through nodeapi only and must not import the node
// daemon; it serves no HTTP and knows no Kubernetes objects beyond reading
// the lease from a Sandbox.
package fleet
