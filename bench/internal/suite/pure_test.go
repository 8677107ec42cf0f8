package suite

import "testing"

func TestResourceOf(t *testing.T) {
	for key, want := range map[string]string{
		"/hearth/sandbox.cocoonstack.io/nodeinventories/node-0":          "sandbox.cocoonstack.io/nodeinventories",
		"/hearth/extensions.agents.x-k8s.io/sandboxwarmpools/default/rt": "extensions.agents.x-k8s.io/sandboxwarmpools",
		"/hearth/coordination.k8s.io/leases/sandbox-system/x":            "coordination.k8s.io/leases",
		"/compact_rev_key": "compact_rev_key",
	} {
		if got := resourceOf(key); got != want {
			t.Errorf("resourceOf(%q) = %q, want %q", key, got, want)
		}
	}
}
