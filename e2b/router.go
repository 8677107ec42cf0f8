package e2b

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"strconv"
	"strings"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"

	"github.com/hearthvm/hearth/agent"
	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/nodeapi"
)

// agent-sandbox's router protocol (docs/API.md#router): a request carrying
// X-Sandbox-ID (the Sandbox's name), X-Sandbox-Namespace (default
// "default") and X-Sandbox-Port (default RuntimePort) goes to that
// sandbox's agent. Port RuntimePort is agent-sandbox's runtime API, which
// the agent serves under agent.RuntimePrefix; any other port goes through
// the agent's authenticated forward to that guest port.
//
// The caller proves access with either
//   - a Kubernetes bearer token, or none (anonymous), (Authorization: Bearer) that
//     Config.Authorizer accepts for `get sandboxes/<name>` in that
//     namespace (TokenReview + SubjectAccessReview behind a kube-apiserver;
//     sandbox-dev's own authenticator and authorizer when embedded), or
//   - the sandbox's own token, as that bearer token or in X-Access-Token.
//
// The caller's credential never reaches the agent: for the runtime API it
// gets the sandbox token in X-Access-Token, for a port forward only the
// forward-only credential (agent.ForwardToken).

// Router protocol headers.
const (
	HeaderSandboxID        = "X-Sandbox-ID"
	HeaderSandboxNamespace = "X-Sandbox-Namespace"
	HeaderSandboxPort      = "X-Sandbox-Port"
)

// RuntimePort is agent-sandbox's runtime API port.
const RuntimePort = 8888

// A SandboxAuthorizer decides whether the holder of a Kubernetes bearer
// token may get sandbox namespace/name. A false answer is a 403 unless the
// token is the sandbox's own.
type SandboxAuthorizer interface {
	AuthorizeSandbox(ctx context.Context, bearer, namespace, name string) (bool, error)
}

// RefLookup finds a sandbox by its "<namespace>/<name>" ref
// (fleet.Fleet is one).
type RefLookup interface {
	ByRef(ctx context.Context, ref string) (nodeapi.Sandbox, error)
}

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
	bearer, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	access := r.Header.Get("X-Access-Token")
	if g.refs == nil {
		writeError(w, http.StatusNotImplemented, "this gateway cannot look sandboxes up by name")
		return
	}
	allowed := false
	if access == "" && g.cfg.Authorizer != nil {
		// No bearer token asks for the API's anonymous access, if any.
		ok, err := g.cfg.Authorizer.AuthorizeSandbox(r.Context(), bearer, ns, name)
		if err != nil {
			writeError(w, http.StatusInternalServerError, "authorizing sandbox %s/%s: %v", ns, name, err)
			return
		}
		allowed = ok
	}
	s, err := g.byRef(r.Context(), ns+"/"+name)
	if err != nil {
		if errors.Is(err, fleet.ErrNotFound) {
			if !allowed {
				// Unauthorized callers learn nothing about which names exist.
				status := http.StatusForbidden
				if bearer == "" && access == "" {
					status = http.StatusUnauthorized
				}
				writeError(w, status, "not allowed to get sandbox %s/%s", ns, name)
				return
			}
			writeError(w, http.StatusNotFound, "sandbox %s/%s not found", ns, name)
			return
		}
		writeError(w, fleet.HTTPStatus(err), "sandbox %s/%s: %v", ns, name, err)
		return
	}
	if !allowed {
		for _, t := range []string{bearer, access} {
			if t != "" && s.Token != "" && subtle.ConstantTimeCompare([]byte(t), []byte(s.Token)) == 1 {
				allowed = true
			}
		}
	}
	if !allowed {
		if bearer == "" && access == "" {
			writeError(w, http.StatusUnauthorized, "a bearer token (Kubernetes, or the sandbox's own) is required")
			return
		}
		writeError(w, http.StatusForbidden, "not allowed to get sandbox %s/%s", ns, name)
		return
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
	if port == RuntimePort {
		u.prefix, u.cred = agent.RuntimePrefix, credToken
	} else {
		u.port, u.cred = port, credForward
	}
	g.proxyTo(w, r, u)
}

// byRef finds the sandbox named ref with its agent address and token: the
// fleet's lookup by ref (claim-time index, view, nodes), completed by the
// owning node when the record it found does not carry them (the view's
// entries do not). A route stays cached for routeTTL, like e2b's.
func (g *gateway) byRef(ctx context.Context, ref string) (nodeapi.Sandbox, error) {
	key := "\x00ref " + ref // never a client id
	now := g.now()
	g.mu.Lock()
	rt, ok := g.routes[key]
	g.mu.Unlock()
	if ok && now.Before(rt.exp) {
		return nodeapi.Sandbox{ID: rt.id, AgentAddr: rt.addr, Token: rt.token}, nil
	}
	s, err := g.refs.ByRef(ctx, ref)
	if err != nil {
		return s, err
	}
	if s.Token == "" || s.AgentAddr == "" {
		if s, err = g.fleet.LiveByID(ctx, s.ID); err != nil {
			return s, err
		}
	}
	if !s.Paused && s.Token != "" && s.AgentAddr != "" {
		g.mu.Lock()
		g.routes[key] = route{id: s.ID, addr: s.AgentAddr, token: s.Token, exp: now.Add(routeTTL)}
		g.mu.Unlock()
	}
	return s, nil
}
