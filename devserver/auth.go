package devserver

import (
	"context"
	"slices"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	"k8s.io/apiserver/pkg/authentication/token/tokenfile"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	authpath "k8s.io/apiserver/pkg/authorization/path"
	"k8s.io/apiserver/pkg/authorization/union"
)

// The dev API server's identities. Each is a static bearer token in the
// data directory (admin-token, readonly-token) and a kubeconfig carrying
// it (kubeconfig, kubeconfig-readonly).
const (
	// AdminUser is in system:masters: every verb on everything.
	AdminUser = "sandbox-dev:admin"
	// ReadOnlyUser is in ReadOnlyGroup: get, list and watch only.
	ReadOnlyUser = "sandbox-dev:readonly"
	// ReadOnlyGroup may get, list and watch any resource and GET the
	// discovery and health paths (readOnlyPaths); nothing else — not
	// /metrics, /debug/pprof/ or /logs.
	ReadOnlyGroup = "hearth:read-only"
)

// readOnlyPaths are the non-resource paths ReadOnlyGroup may GET: those
// Kubernetes' system:discovery and system:public-info-viewer roles grant
// (a trailing * matches any rest). With the resource reads this is what
// the view role and those two give a user.
var readOnlyPaths = []string{"/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*", "/version", "/version/", "/healthz", "/livez", "/readyz"}

// authFor returns the dev server's authenticator (the two bearer tokens;
// no anonymous requests: 401 without a known token) and authorizer
// (system:masters may do anything, ReadOnlyGroup may read; everything else
// is forbidden).
func authFor(adminToken, readOnlyToken string) (authenticator.Request, authorizer.Authorizer) {
	tokens := tokenfile.New(map[string]*user.DefaultInfo{
		adminToken:    {Name: AdminUser, UID: AdminUser, Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}},
		readOnlyToken: {Name: ReadOnlyUser, UID: ReadOnlyUser, Groups: []string{ReadOnlyGroup, user.AllAuthenticated}},
	})
	authz, err := union.New(
		union.NamedAuthorizer{AuthorizerName: "privileged-groups", Authorizer: authorizerfactory.NewPrivilegedGroups(user.SystemPrivilegedGroup)},
		union.NamedAuthorizer{AuthorizerName: "read-only", Authorizer: authorizer.AuthorizerFunc(newReadOnlyAuthorizer().Authorize)},
	)
	if err != nil {
		panic(err) // union.New fails only on empty or duplicate names, fixed here
	}
	return bearertoken.New(tokens), authz
}

// readOnlyAuthorizer allows ReadOnlyGroup the read verbs on resources
// and GET on readOnlyPaths, and has no opinion on anything else.
type readOnlyAuthorizer struct {
	paths authorizer.Authorizer
}

func newReadOnlyAuthorizer() readOnlyAuthorizer {
	paths, err := authpath.NewAuthorizer(readOnlyPaths)
	if err != nil {
		panic(err) // only a * before the end fails, fixed here
	}
	return readOnlyAuthorizer{paths: paths}
}

var readVerbs = []string{"get", "list", "watch"}

func (ro readOnlyAuthorizer) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	u := a.GetUser()
	if u == nil || !slices.Contains(u.GetGroups(), ReadOnlyGroup) {
		return authorizer.DecisionNoOpinion, "", nil
	}
	if !a.IsResourceRequest() {
		if a.GetVerb() == "get" {
			if d, _, err := ro.paths.Authorize(ctx, a); d == authorizer.DecisionAllow && err == nil {
				return authorizer.DecisionAllow, "read-only user: discovery and health", nil
			}
		}
		return authorizer.DecisionNoOpinion, "read-only user: GET of discovery and health paths only", nil
	}
	if slices.Contains(readVerbs, a.GetVerb()) {
		return authorizer.DecisionAllow, "read-only user", nil
	}
	return authorizer.DecisionNoOpinion, "read-only user: get, list and watch only", nil
}
