package server

import (
	"context"
	"net/http"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/hearthvm/hearth/e2b"
)

// apiAuthorizer admits a bearer token on the gateway's router protocol
// (e2b.SandboxAuthorizer) exactly when the API server itself would let its
// holder `create sandboxes/<name>/<subresource>` (exec for the runtime
// port, portforward for any other) in the namespace — what kube-apiserver
// asks of pods/exec and pods/portforward: running code is a write, so
// `get sandboxes` (a read-only kubeconfig) is not enough. It runs the
// server's own authenticator and authorizer. Behind a kube-apiserver those
// are the delegated ones (TokenReview, SubjectAccessReview, with their
// caches); in sandbox-dev they are whatever sandbox-dev's API runs.
type apiAuthorizer struct {
	authn authenticator.Request
	authz authorizer.Authorizer
}

// RouterAuthorizer is the router's authorizer over an API server's
// authenticator and authorizer (see apiAuthorizer).
func RouterAuthorizer(authn authenticator.Request, authz authorizer.Authorizer) e2b.SandboxAuthorizer {
	return apiAuthorizer{authn: authn, authz: authz}
}

func (a apiAuthorizer) AuthorizeSandbox(ctx context.Context, bearer, namespace, name, subresource string) (bool, error) {
	if subresource != e2b.SubresourceExec && subresource != e2b.SubresourcePortForward {
		return false, nil
	}
	if a.authn == nil || a.authz == nil {
		return false, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
	if err != nil {
		return false, err
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, ok, err := a.authn.AuthenticateRequest(req)
	if err != nil || !ok {
		return false, nil // an invalid token is a refusal, not a failure
	}
	decision, _, err := a.authz.Authorize(ctx, authorizer.AttributesRecord{
		User:            resp.User,
		Verb:            "create",
		Namespace:       namespace,
		APIGroup:        sandboxv1beta1.GroupVersion.Group,
		APIVersion:      sandboxv1beta1.GroupVersion.Version,
		Resource:        "sandboxes",
		Subresource:     subresource,
		Name:            name,
		ResourceRequest: true,
	})
	if err != nil && decision != authorizer.DecisionAllow {
		return false, err
	}
	return decision == authorizer.DecisionAllow, nil
}
