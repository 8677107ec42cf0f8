package e2b

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/egress"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
	"github.com/hearthvm/hearth/sandbox"
)

// addWarmEgress adds n warm sandboxes of template's egress lane.
func (f *fakeFleet) addWarmEgress(template string, n int) {
	k, _ := pool.KeyForE2B(template, true)
	f.mu.Lock()
	f.warm[k] += n
	f.mu.Unlock()
}

func (f *fakeFleet) claimed() []nodeapi.ClaimRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]nodeapi.ClaimRequest(nil), f.claims...)
}

// A create's allow_internet_access and network.{allowOut,denyOut} are the
// claim's lane and egress policy, in e2b's order (allowOut first: an allow
// beats a deny), and GET /sandboxes/{id} renders them back as the SDK's
// getInfo reads them.
func TestCreate_NetworkListsAreTheClaimsEgressPolicy(t *testing.T) {
	g := startGateway(t)
	g.f.addWarmEgress("rt", 10)
	no, yes := false, true
	for _, tc := range []struct {
		name     string
		body     map[string]any
		net      string
		policy   *egress.Policy
		internet bool
		allowOut []string
		denyOut  []string
	}{
		{name: "no fields: the none lane", body: map[string]any{}, net: sandbox.NetNone},
		{name: "internet refused, no lists: the none lane", body: map[string]any{"allow_internet_access": no}, net: sandbox.NetNone},
		{name: "internet allowed: the egress lane unfiltered", body: map[string]any{"allow_internet_access": yes}, net: sandbox.NetEgress, internet: true},
		{
			name: "deny all but a domain and a CIDR",
			body: map[string]any{"network": map[string]any{"denyOut": []string{egress.AllTraffic}, "allowOut": []string{"Allowed.test.", "198.18.0.0/15"}}},
			net:  sandbox.NetEgress,
			policy: &egress.Policy{Otherwise: egress.Allow, Rules: []egress.Rule{
				{Action: egress.Allow, Domain: "allowed.test"},
				{Action: egress.Allow, CIDR: "198.18.0.0/15"},
				{Action: egress.Deny, CIDR: "0.0.0.0/0"},
				{Action: egress.Deny, CIDR: "::/0"},
			}},
			internet: true, allowOut: []string{"allowed.test", "198.18.0.0/15"}, denyOut: []string{egress.AllTraffic},
		},
		{
			name:     "internet refused with an allow-list",
			body:     map[string]any{"allow_internet_access": no, "network": map[string]any{"allowOut": []string{"203.0.113.7", "*.wild.test"}}},
			net:      sandbox.NetEgress,
			policy:   &egress.Policy{Otherwise: egress.Deny, Rules: []egress.Rule{{Action: egress.Allow, CIDR: "203.0.113.7"}, {Action: egress.Allow, Domain: "*.wild.test"}}},
			allowOut: []string{"203.0.113.7", "*.wild.test"},
		},
		{
			name:     "a specific deny",
			body:     map[string]any{"network": map[string]any{"denyOut": []string{"203.0.113.0/24"}}},
			net:      sandbox.NetEgress,
			policy:   &egress.Policy{Otherwise: egress.Allow, Rules: []egress.Rule{{Action: egress.Deny, CIDR: "203.0.113.0/24"}}},
			internet: true, denyOut: []string{"203.0.113.0/24"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(g.f.claimed())
			body := map[string]any{"templateID": "rt"}
			for k, v := range tc.body {
				body[k] = v
			}
			s := g.create(body)
			claims := g.f.claimed()
			require.Len(t, claims, before+1)
			req := claims[len(claims)-1]
			require.Equal(t, tc.net, req.Net)
			require.Equal(t, tc.policy, req.Egress)

			var d struct {
				AllowInternetAccess *bool `json:"allowInternetAccess"`
				Network             *struct {
					AllowOut           []string `json:"allowOut"`
					DenyOut            []string `json:"denyOut"`
					AllowPublicTraffic *bool    `json:"allowPublicTraffic"`
				} `json:"network"`
			}
			resp, b := g.call("GET", "/sandboxes/"+s.SandboxID, nil, &d)
			require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
			require.NotNil(t, d.AllowInternetAccess, string(b))
			require.Equal(t, tc.internet, *d.AllowInternetAccess, string(b))
			require.NotNil(t, d.Network, string(b))
			require.Equal(t, tc.allowOut, d.Network.AllowOut, string(b))
			require.Equal(t, tc.denyOut, d.Network.DenyOut, string(b))
			require.Equal(t, &yes, d.Network.AllowPublicTraffic, string(b))
		})
	}
}

// Bad egress input is a 400 naming the request's field, and no node is
// asked: nothing is half-applied.
func TestCreate_InvalidNetworkListIsA400NamingTheFieldWithNoClaim(t *testing.T) {
	g := startGateway(t)
	g.f.addWarmEgress("rt", 10)
	many := make([]string, egress.MaxRules+1)
	for i := range many {
		many[i] = fmt.Sprintf("10.0.%d.%d", i/256, i%256)
	}
	for _, tc := range []struct {
		name, templateID string
		network          map[string]any
		field            string
	}{
		{name: "invalid CIDR", network: map[string]any{"allowOut": []string{"10.0.0.300/8"}}, field: "network.allowOut[0]"},
		{name: "prefix out of range", network: map[string]any{"denyOut": []string{"1.1.1.1", "10.0.0.0/33"}}, field: "network.denyOut[1]"},
		{name: "a domain in denyOut", network: map[string]any{"denyOut": []string{"denied.test"}}, field: "network.denyOut[0]"},
		{name: "an empty domain label", network: map[string]any{"allowOut": []string{"ok.test", "bad..test"}}, field: "network.allowOut[1]"},
		{name: "too many rules", network: map[string]any{"denyOut": many}, field: "network"},
		{name: "a list on a create from a snapshot", templateID: "sn_0123456789abcdef", network: map[string]any{"allowOut": []string{"allowed.test"}}, field: "network.allowOut"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := tc.templateID
			if id == "" {
				id = "rt"
			}
			looked := g.f.lookupCount()
			resp, b := g.call("POST", "/v2/sandboxes", map[string]any{"templateID": id, "network": tc.network}, nil)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, string(b))
			require.Contains(t, string(b), tc.field)
			require.Empty(t, g.f.claimed(), "no node may be asked")
			require.Equal(t, looked, g.f.lookupCount(), "no node may be asked")
		})
	}
}

// The SDK's updateNetwork is a 409: the policy is fixed at claim time. An
// unknown sandbox is the 404 the SDK maps to SandboxNotFoundError.
func TestUpdateNetwork_IsAConflictTheSandboxKeepsItsPolicy(t *testing.T) {
	g := startGateway(t)
	g.f.addWarmEgress("rt", 1)
	s := g.create(map[string]any{"templateID": "rt", "network": map[string]any{"denyOut": []string{egress.AllTraffic}}})
	resp, b := g.call("PUT", "/sandboxes/"+s.SandboxID+"/network", map[string]any{"allow_internet_access": true}, nil)
	require.Equal(t, http.StatusConflict, resp.StatusCode, string(b))
	require.True(t, strings.Contains(string(b), "fixed at claim time"), string(b))
	var d struct {
		Network struct {
			DenyOut []string `json:"denyOut"`
		} `json:"network"`
	}
	resp, b = g.call("GET", "/sandboxes/"+s.SandboxID, nil, &d)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Equal(t, []string{egress.AllTraffic}, d.Network.DenyOut, "the policy is unchanged")

	resp, b = g.call("PUT", "/sandboxes/"+RenderID("sb_9999")+"/network", map[string]any{}, nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode, string(b))
}

// A body's worth of bad entries is one error, not one per entry: the
// answer stays small (no amplification) and no node is asked.
func TestCreate_ManyBadNetworkEntriesAreOneSmallError(t *testing.T) {
	g := startGateway(t)
	g.f.addWarmEgress("rt", 1)
	bad := make([]string, 5*egress.MaxRules) // "" is no IP or CIDR
	resp, b := g.call("POST", "/v2/sandboxes", map[string]any{"templateID": "rt", "network": map[string]any{"allowOut": bad}}, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Less(t, len(b), 4096, "the answer is bounded")
	require.Contains(t, string(b), "network")
	require.Empty(t, g.f.claimed())
}

// A create from a snapshot named by templateID keeps the snapshot's
// policy: lists with it are a 400, never a clone with the lists dropped.
func TestCreate_NetworkListsOnASnapshotByNameAreA400NotDropped(t *testing.T) {
	g := startGateway(t)
	s := g.create(map[string]any{"templateID": "rt"})
	resp, b := g.call("POST", "/sandboxes/"+s.SandboxID+"/snapshots", map[string]any{"name": "golden"}, nil)
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(b))
	resp, b = g.call("POST", "/v2/sandboxes", map[string]any{"templateID": "golden", "network": map[string]any{"denyOut": []string{egress.AllTraffic}}}, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, string(b))
	require.Contains(t, string(b), "snapshot's egress policy")
	var list []listedJSON
	g.call("GET", "/v2/sandboxes", nil, &list)
	require.Len(t, list, 1, "no clone was claimed")
	// Without lists, the same create is a clone of it.
	g.create(map[string]any{"templateID": "golden"})
}

// envVars on a create from a snapshot (by id or by name) are a 400, not
// dropped: the clone resumes the snapshot's processes with their
// environment and the node has none to give it.
func TestCreate_EnvVarsOnASnapshotAreA400NotDropped(t *testing.T) {
	g := startGateway(t)
	s := g.create(map[string]any{"templateID": "rt"})
	var snap struct {
		SnapshotID string `json:"snapshotID"`
	}
	resp, b := g.call("POST", "/sandboxes/"+s.SandboxID+"/snapshots", map[string]any{"name": "golden"}, &snap)
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(b))
	for _, tmpl := range []string{"golden", snap.SnapshotID} {
		if tmpl == "" {
			continue
		}
		resp, b = g.call("POST", "/v2/sandboxes", map[string]any{"templateID": tmpl, "envVars": map[string]string{"A": "1"}}, nil)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s: %s", tmpl, b)
		require.Contains(t, string(b), "envVars cannot be set on a create from a snapshot")
	}
	var list []listedJSON
	g.call("GET", "/v2/sandboxes", nil, &list)
	require.Len(t, list, 1, "no clone was claimed")
}
