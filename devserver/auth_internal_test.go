package devserver

import (
	"context"
	"net/http"
	"testing"

	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/hearthvm/hearth/e2b"
	"github.com/hearthvm/hearth/server"
)

func TestAuthFor_TokensMapToUsersAndVerbs(t *testing.T) {
	authn, authz := authFor("admin-tok", "ro-tok")
	for _, tc := range []struct {
		token, verb string
		wantUser    string // "" = not authenticated (401)
		allowed     bool
	}{
		{"admin-tok", "create", AdminUser, true},
		{"admin-tok", "delete", AdminUser, true},
		{"ro-tok", "get", ReadOnlyUser, true},
		{"ro-tok", "list", ReadOnlyUser, true},
		{"ro-tok", "watch", ReadOnlyUser, true},
		{"ro-tok", "create", ReadOnlyUser, false},
		{"ro-tok", "update", ReadOnlyUser, false},
		{"ro-tok", "patch", ReadOnlyUser, false},
		{"ro-tok", "delete", ReadOnlyUser, false},
		{"ro-tok", "deletecollection", ReadOnlyUser, false},
		{"ro-tok", "impersonate", ReadOnlyUser, false},
		{"", "get", "", false},
		{"wrong", "get", "", false},
	} {
		req, _ := http.NewRequest(http.MethodGet, "https://x/apis", nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, ok, err := authn.AuthenticateRequest(req)
		if tc.wantUser == "" {
			if ok {
				t.Errorf("token %q authenticated as %v", tc.token, resp.User)
			}
			continue
		}
		if err != nil || !ok || resp.User.GetName() != tc.wantUser {
			t.Errorf("token %q: %v %v %v, want %s", tc.token, resp, ok, err, tc.wantUser)
			continue
		}
		d, _, err := authz.Authorize(context.Background(), authorizer.AttributesRecord{
			User: resp.User, Verb: tc.verb, ResourceRequest: true,
			APIGroup: "agents.x-k8s.io", Resource: "sandboxes", Namespace: "default",
		})
		if err != nil || (d == authorizer.DecisionAllow) != tc.allowed {
			t.Errorf("%s %s: decision %v (%v), want allowed=%v", tc.wantUser, tc.verb, d, err, tc.allowed)
		}
	}
}

// TestAuthFor_RouterNeedsExecOrPortForward: on the gateway's router, the
// read-only token (get, list, watch) runs nothing — neither the runtime
// API (create sandboxes/exec) nor a port forward (create
// sandboxes/portforward); the admin token may do both.
func TestAuthFor_RouterNeedsExecOrPortForward(t *testing.T) {
	ra := server.RouterAuthorizer(authFor("admin-tok", "ro-tok"))
	for _, sub := range []string{e2b.SubresourceExec, e2b.SubresourcePortForward} {
		for tok, want := range map[string]bool{"admin-tok": true, "ro-tok": false, "": false, "wrong": false} {
			ok, err := ra.AuthorizeSandbox(context.Background(), tok, "default", "demo", sub)
			if err != nil || ok != want {
				t.Errorf("token %q, create sandboxes/%s: %v (%v), want %v", tok, sub, ok, err, want)
			}
		}
	}
	if ok, _ := ra.AuthorizeSandbox(context.Background(), "admin-tok", "default", "demo", ""); ok {
		t.Error("no subresource: allowed, want refused")
	}
}
