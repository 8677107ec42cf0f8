package devserver

import (
	"context"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// The read-only token's non-resource reach is Kubernetes' discovery and
// public-info roles': GET of discovery, OpenAPI, version and health, not
// /metrics, /debug/pprof/ or /logs, which the admin token reaches.
func TestAuthFor_ReadOnlyGetsDiscoveryAndHealthNotMetricsOrProfiles(t *testing.T) {
	_, authz := authFor("admin-tok", "ro-tok")
	ro := &user.DefaultInfo{Name: ReadOnlyUser, Groups: []string{ReadOnlyGroup, user.AllAuthenticated}}
	admin := &user.DefaultInfo{Name: AdminUser, Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}}
	for _, tc := range []struct {
		u       user.Info
		verb    string
		path    string
		allowed bool
	}{
		{ro, "get", "/api", true},
		{ro, "get", "/api/v1", true},
		{ro, "get", "/apis", true},
		{ro, "get", "/apis/agents.x-k8s.io/v1beta1", true},
		{ro, "get", "/openapi/v2", true},
		{ro, "get", "/openapi/v3/apis/agents.x-k8s.io/v1beta1", true},
		{ro, "get", "/version", true},
		{ro, "get", "/healthz", true},
		{ro, "get", "/livez", true},
		{ro, "get", "/readyz", true},
		{ro, "get", "/metrics", false},
		{ro, "get", "/metrics/slis", false},
		{ro, "get", "/debug/pprof/", false},
		{ro, "get", "/debug/pprof/heap", false},
		{ro, "get", "/debug/flags/v", false},
		{ro, "put", "/debug/flags/v", false},
		{ro, "get", "/logs/", false},
		{ro, "get", "/healthz/etcd", false},
		{ro, "get", "/apisx", false},
		{ro, "post", "/apis", false},
		{ro, "get", "/", false},
		{admin, "get", "/metrics", true},
		{admin, "get", "/debug/pprof/", true},
	} {
		d, reason, err := authz.Authorize(context.Background(), authorizer.AttributesRecord{User: tc.u, Verb: tc.verb, Path: tc.path})
		if err != nil || (d == authorizer.DecisionAllow) != tc.allowed {
			t.Errorf("%s %s %s: %v (%s, %v), want allowed %v", tc.u.GetName(), tc.verb, tc.path, d, reason, err, tc.allowed)
		}
	}
}
