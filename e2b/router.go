package e2b

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"strconv"
	"strings"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"

	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/nodeapi"
)

// agent-sandbox's router protocol (docs/API.md#router): a request carrying
// X-Sandbox-ID (the Sandbox's name), X-Sandbox-Namespace (default
// "default") and X-Sandbox-Port (default RuntimePort) goes to that
// sandbox's agent. Port RuntimePort is agent-sandbox's runtime API, which
// the agent serves under agentapi.RuntimePrefix; any other port goes through
// the agent's authenticated forward to that guest port.
//
// The caller proves access with either
//   - a Kubernetes bearer token, or none (anonymous), (Authorization: Bearer) that
//     Config.Authorizer accepts for `create sandboxes/exec` (the runtime
//     port, and the code interpreter's port agentapi.InterpreterPort, which
//     runs code too) or `create sandboxes/portforward` (any other port) of
//     <name> in that namespace, as kube-apiserver asks of pods — running
//     code is a write (TokenReview + SubjectAccessReview behind a
//     kube-apiserver; sandbox-dev's own authenticator and authorizer when
//     embedded), or
//   - the sandbox's own token, as that bearer token or in X-Access-Token.
//
// The caller's credential never reaches the agent: for the runtime API and
// the code interpreter it gets the sandbox token in X-Access-Token, for a
// port forward only the forward-only credential (agentapi.ForwardToken).

// Router protocol headers.
const (
	HeaderSandboxID        = "X-Sandbox-ID"
	HeaderSandboxNamespace = "X-Sandbox-Namespace"
	HeaderSandboxPort      = "X-Sandbox-Port"
)

// RuntimePort is agent-sandbox's runtime API port.
const RuntimePort = 8888

// Router subresources: what a caller must be allowed to `create` on
// sandboxes/<name> (group agents.x-k8s.io), as kube-apiserver asks of
// pods/exec and pods/portforward — running code is a write, not a read.
const (
	// SubresourceExec is the runtime port (RuntimePort): agent-sandbox's
	// runtime API (execute, upload, download, list, exists); and the code
	// interpreter's port (agentapi.InterpreterPort).
	SubresourceExec = "exec"
	// SubresourcePortForward is any other port of the sandbox.
	SubresourcePortForward = "portforward"
)

// A SandboxAuthorizer decides whether the holder of a Kubernetes bearer
// token (empty: anonymous) may `create` subresource (SubresourceExec or
// SubresourcePortForward) of sandbox namespace/name. A false answer is a
// refusal unless the token is the sandbox's own.
type SandboxAuthorizer interface {
	AuthorizeSandbox(ctx context.Context, bearer, namespace, name, subresource string) (bool, error)
}

// RefLookup finds a sandbox by its "<namespace>/<name>" ref
// (fleet.NodeFleet is one).
type RefLookup interface {
	// ByRef may ask every node (for a caller the Authorizer admitted).
	ByRef(ctx context.Context, ref string) (nodeapi.Sandbox, error)
	// KnownByRef asks only the node the fleet's index or view names,
	// never a fan-out (for a caller with only a sandbox token to check).
	KnownByRef(ctx context.Context, ref string) (nodeapi.Sandbox, error)
}

// Access is decided before any node is asked: the bearer token by the
// Authorizer (no node call); a caller it does not admit costs at most the
// one node the view names, and learns nothing about which names exist —
// an unknown name and a wrong token get the same answer. An Authorizer
// that cannot decide (an error: its SubjectAccessReview backend is
// unavailable) is a 503 with Retry-After, unless the sandbox's own token
// admits the caller.
func (g *gateway) serveRouter(w http.ResponseWriter, r *http.Request) {
	name := r.Header.Get(HeaderSandboxID)
	ns := r.Header.Get(HeaderSandboxNamespace)
	if ns == "" {
		ns = "default"
	}
	if errs := apivalidation.NameIsDNSSubdomain(name, false); len(errs) > 0 {
		writeError(w, http.StatusBadRequest, "%s %.64q: %s", HeaderSandboxID, name, strings.Join(errs, "; "))
		return
	}
	if errs := apivalidation.ValidateNamespaceName(ns, false); len(errs) > 0 {
		writeError(w, http.StatusBadRequest, "%s %.64q: %s", HeaderSandboxNamespace, ns, strings.Join(errs, "; "))
		return
	}
	port := RuntimePort
	if v := r.Header.Get(HeaderSandboxPort); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 65535 {
			writeError(w, http.StatusBadRequest, "%s %.16q is not a port", HeaderSandboxPort, v)
			return
		}
		port = n
	}
	// The runtime port and the code interpreter's (which the agent serves
	// itself, and which runs code) are exec; any other port is a forward.
	sub := SubresourceExec
	if port != RuntimePort && port != agentapi.InterpreterPort {
		sub = SubresourcePortForward
	}
	bearer, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if bearer == r.Header.Get("Authorization") {
		bearer = "" // not a bearer token (Basic, or none)
	}
	access := r.Header.Get("X-Access-Token")
	if g.refs == nil {
		writeError(w, http.StatusNotImplemented, "this gateway cannot look sandboxes up by name")
		return
	}
	// undecided: the authorizer could not decide (its backend, a
	// SubjectAccessReview, is unavailable). The caller gets 503 with
	// Retry-After unless the sandbox's own token admits it — the same
	// answer for any name, and no backend error in it.
	allowed, undecided := false, false
	if g.cfg.Authorizer != nil && (bearer != "" || access == "") {
		// No bearer token asks for the API's anonymous access, if any.
		ok, err := g.cfg.Authorizer.AuthorizeSandbox(r.Context(), bearer, ns, name, sub)
		allowed, undecided = ok && err == nil, err != nil
	}
	refuse := func() {
		if undecided {
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, "cannot authorize sandboxes/%s of %s/%s now: the authorizer is unavailable; retry", sub, ns, name)
			return
		}
		if bearer == "" && access == "" {
			writeError(w, http.StatusUnauthorized, "a bearer token (Kubernetes, or the sandbox's own) is required to create sandboxes/%s of %s/%s", sub, ns, name)
			return
		}
		writeError(w, http.StatusForbidden, "not allowed to create sandboxes/%s of %s/%s", sub, ns, name)
	}
	ref := ns + "/" + name
	var s nodeapi.Sandbox
	var err error
	if allowed {
		s, err = g.byRef(r.Context(), ref, false)
		if errors.Is(err, fleet.ErrNotFound) {
			writeError(w, http.StatusNotFound, "sandbox %s/%s not found", ns, name)
			return
		}
		if err != nil {
			writeError(w, fleet.HTTPStatus(err), "sandbox %s/%s: %v", ns, name, err)
			return
		}
	} else {
		if bearer == "" && access == "" {
			refuse()
			return
		}
		// Only the sandbox's own token can admit the caller now: it is
		// checked against the record of the one node the view names; no
		// such record, an unreachable node and a wrong token look alike.
		s, err = g.byRef(r.Context(), ref, true)
		ok := false
		for _, t := range []string{bearer, access} {
			if err == nil && t != "" && s.Token != "" && subtle.ConstantTimeCompare([]byte(t), []byte(s.Token)) == 1 {
				ok = true
			}
		}
		if !ok {
			refuse()
			return
		}
	}
	if s.Paused {
		writeError(w, http.StatusConflict, "sandbox %s/%s is paused; resume it first", ns, name)
		return
	}
	if s.AgentAddr == "" || s.Token == "" {
		writeError(w, http.StatusBadGateway, "sandbox %s/%s has no agent", ns, name)
		return
	}
	// The caller's credential never reaches the agent; the runtime API
	// gets the sandbox token, a port forward only the forward token.
	u := upstream{route: route{id: s.ID, addr: s.AgentAddr, token: s.Token}, dropAuthorization: true}
	switch {
	case port == RuntimePort:
		u.prefix, u.cred = agentapi.RuntimePrefix, credToken
	case sub == SubresourceExec: // the code interpreter
		u.port, u.cred = port, credToken
	default:
		u.port, u.cred = port, credForward
	}
	g.proxyTo(w, r, u)
}

// byRef finds the sandbox named ref with its agent address and token: the
// fleet's lookup by ref (claim-time index, view, nodes), completed by the
// owning node when the record it found does not carry them (the view's
// entries do not). A route stays cached for routeTTL, like e2b's.
//
// known asks only the node the fleet's index or view names (RefLookup.KnownByRef,
// Fleet.KnownByID): never a fan-out.
func (g *gateway) byRef(ctx context.Context, ref string, known bool) (nodeapi.Sandbox, error) {
	key := "\x00ref " + ref // never a client id
	now := g.now()
	if rt, ok := g.cachedRoute(key, now); ok {
		return nodeapi.Sandbox{ID: rt.id, AgentAddr: rt.addr, Token: rt.token}, nil
	}
	find, byID := g.refs.ByRef, g.fleet.LiveByID
	if known {
		find, byID = g.refs.KnownByRef, g.fleet.KnownByID
	}
	s, err := find(ctx, ref)
	if err != nil {
		return s, err
	}
	if s.Token == "" || s.AgentAddr == "" {
		if s, err = byID(ctx, s.ID); err != nil {
			return s, err
		}
	}
	if !s.Paused && s.Token != "" && s.AgentAddr != "" {
		g.routes.Add(key, route{id: s.ID, addr: s.AgentAddr, token: s.Token, exp: now.Add(routeTTL)})
	}
	return s, nil
}
