package sandbox

// Annotation keys (docs/API.md#names). They travel on Sandbox objects.
const (
	// AnnotationNet selects the pool network lane: "none" (default) or "egress".
	AnnotationNet = "sandbox.cocoonstack.io/net"
	// AnnotationTTLSeconds asks for a lease in seconds when spec.shutdownTime is unset.
	AnnotationTTLSeconds = "sandbox.cocoonstack.io/ttl-seconds"
	// AnnotationClaimID carries the node-local claim id ("sb_…").
	AnnotationClaimID = "sandbox.cocoonstack.io/claim-id"
	// AnnotationAddress carries the sandbox agent's host:port.
	AnnotationAddress = "sandbox.cocoonstack.io/address"
	// AnnotationToken carries the sandbox's own bearer token (create response only).
	AnnotationToken = "sandbox.cocoonstack.io/token"
	// AnnotationDeadline carries the granted lease expiry, RFC3339 UTC, whole seconds.
	AnnotationDeadline = "sandbox.cocoonstack.io/deadline"
	// AnnotationRuntime selects the Pod-path runtime: "vk-cocoon" or "sandboxd".
	AnnotationRuntime = "sandbox.cocoonstack.io/runtime"
)

// Label keys stamped on every read of a sandbox.
const (
	LabelNode     = "sandbox.cocoonstack.io/node"
	LabelPhase    = "sandbox.cocoonstack.io/phase"
	LabelClaim    = "sandbox.cocoonstack.io/claim"
	LabelTemplate = "sandbox.cocoonstack.io/template"
)

// LabelE2B "true" on a claim's object makes the sandbox visible to the e2b
// gateway's API keys of its namespace (list, get, kill, pause, connect,
// metrics, fork, snapshot): an e2b create carries it; a sandbox created
// through Kubernetes is e2b's only when its object carries it at create.
// The node records that decision at claim (nodeapi.Lifecycle.E2B); adding
// or removing the label later changes nothing (docs/API.md#e2b-api).
const LabelE2B = "sandbox.cocoonstack.io/e2b"

// Network lanes.
const (
	NetNone   = "none"
	NetEgress = "egress"
)

// Size classes.
const (
	SizeSmall  = "small"
	SizeMedium = "medium"
	SizeLarge  = "large"
)

// Phases a node reports for a claimed sandbox.
const (
	PhaseRunning = "Running"
	PhasePaused  = "Paused"
)

// DeadlineFormat is the layout of AnnotationDeadline: RFC3339, UTC, whole seconds.
const DeadlineFormat = "2006-01-02T15:04:05Z"
