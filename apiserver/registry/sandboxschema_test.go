package registry

import "testing"

// The Sandbox schema the aggregated API publishes is upstream's CRD
// schema: typed spec and status, stripped of what OpenAPI v2 cannot carry.
func TestSandboxSchema_IsUpstreamsCRD(t *testing.T) {
	s, err := SandboxSchema()
	if err != nil {
		t.Fatal(err)
	}
	spec, ok := s.Properties["spec"]
	if !ok {
		t.Fatal("no spec")
	}
	if _, ok := spec.Properties["podTemplate"]; !ok {
		t.Errorf("spec lacks podTemplate: %v", keys(spec.Properties))
	}
	status := s.Properties["status"]
	for _, f := range []string{"conditions", "nodeName", "podIPs"} {
		if _, ok := status.Properties[f]; !ok {
			t.Errorf("status lacks %s: %v", f, keys(status.Properties))
		}
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
