package agentapi

// Port is the guest port the agent serves on (TCP, or vsock for the
// Firecracker and Cloud Hypervisor guests): envd's port in e2b
// addressing.
const Port = 49983

// InterpreterPort is the code interpreter's port in e2b addressing: the
// agent answers a forward to it itself (package agent, interpreter.go)
// unless it runs with --no-interpreter.
const InterpreterPort = 49999

// Version is the envd version the agent serves, advertised to the e2b
// SDK: the newest of the SDK's feature gates (e2b@2.51.0 envd/versions.ts)
// that the agent serves — recursive watches (0.1.4), octet-stream uploads
// (0.5.7), X-Metadata file metadata (0.6.2), entries in watch events
// (0.6.3) and watches on network mounts (0.6.4: the agent refuses no
// mount).
const Version = "0.6.4"

// AccessTokenHeader carries the sandbox's access token, on every request
// to the agent but GET /health.
const AccessTokenHeader = "X-Access-Token"

// InternalHeaderPrefix starts every header Hearth's components set for
// each other (ForwardPortHeader, ForwardTokenHeader, SandboxIDHeader,
// PortClosedHeader): a proxy drops a client's before setting its own, and
// none reaches a guest app.
const InternalHeaderPrefix = "X-Hearth-"

// ForwardPortHeader asks the agent to forward the request to a port of the
// guest instead of serving it: the value is the port (1-65535) on the
// guest's loopback. It is how the e2b gateway reaches any port of a
// sandbox (E2b-Sandbox-Port) through the one address it knows, the
// agent's. A forwarded request needs the sandbox token like any other
// (GET /health included), or the forward-only credential
// (ForwardTokenHeader); no internal header and no token is passed on.
// HTTP, streaming and upgraded (WebSocket) connections are forwarded.
const ForwardPortHeader = "X-Hearth-Forward-Port"

// ForwardTokenHeader carries the forward-only credential (ForwardToken):
// what the e2b gateway sends, instead of the sandbox token, for a request
// it admitted to a guest port only.
const ForwardTokenHeader = "X-Hearth-Forward-Token"

// PortClosedHeader marks the agent's 502 for a forward to a guest port
// nothing listens on (the connection was refused), so that the gateway
// can answer as e2b does for a closed port; its value is the port.
const PortClosedHeader = "X-Hearth-Port-Closed"

// SandboxIDHeader carries, on every request the e2b gateway forwards, the
// id of the sandbox the request was addressed to (the gateway sets it and
// drops a client's). Processes the agent starts from then on get it as
// E2B_SANDBOX_ID, as on e2b; every process gets E2B_SANDBOX=true. The id
// is taken from requests, not fixed at boot, so a fork child or a clone
// of a snapshot names itself, not its source.
const SandboxIDHeader = "X-Hearth-Sandbox-Id"

// HealthPath is GET: 204 once the agent serves; no token needed.
const HealthPath = "/health"

// InitPath is POST InitRequest: environment variables added to every
// process the agent starts from then on (the node posts a claim's env
// there).
const InitPath = "/init"

// InternalPathPrefix starts the agent's paths that are for the node alone
// (IdentityPath): the e2b gateway answers 404 for them, so no client
// reaches them through its data plane or router, token or not.
const InternalPathPrefix = "/hearth/"

// IdentityPath is POST IdentityRequest: it replaces the agent's access
// token. Like every endpoint but /health it needs the current token, so
// only the holder of the old identity can hand out a new one. A VMM
// backend calls it right after cloning a VM from a checkpoint, whose
// memory still holds the checkpointed guest's token. An agent started with
// --token-file writes the new token there (atomically) before it takes
// effect, so an agent restarted from that file keeps it.
const IdentityPath = InternalPathPrefix + "identity"

// RuntimePrefix is where the agent serves agent-sandbox's runtime API
// (the python runtime's routes, docs/API.md#router), so that it cannot
// shadow envd's routes.
const RuntimePrefix = "/agent-sandbox"

// InitRequest is the body of POST /init.
type InitRequest struct {
	EnvVars map[string]string `json:"envVars"`
}

// IdentityRequest is the body of POST /hearth/identity: the new access
// token (non-empty).
type IdentityRequest struct {
	Token string `json:"token"`
}
