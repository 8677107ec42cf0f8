package devserver

import (
	"context"
	"net/http"
	"testing"

	"k8s.io/apiserver/pkg/authorization/authorizer"
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
