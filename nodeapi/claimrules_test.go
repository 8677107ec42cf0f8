package nodeapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/hearthvm/hearth/nodeapi"
)

// TestClaimRequest_ValidateIsEveryClaimRule: each rule of a claim that
// needs no node, with the status the node answers (ClaimStatus) and the
// field the error names.
func TestClaimRequest_ValidateIsEveryClaimRule(t *testing.T) {
	many := func(n int, size int) map[string]string {
		m := make(map[string]string, n)
		for i := range n {
			m[fmt.Sprintf("K%05d", i)] = strings.Repeat("v", size)
		}
		return m
	}
	ok := nodeapi.ClaimRequest{Template: "img:1", ClaimRef: "ns/a", TTLSeconds: 60,
		Env:      map[string]string{"PATH": "/bin", "my-var.x": "ü", "EMPTY": ""},
		Metadata: map[string]string{"k": "", "user": "x"},
		Object: nodeapi.Object{Labels: map[string]string{"team": "a", "example.com/x": "y"}, Annotations: map[string]string{"note": "anything at all"},
			Spec: json.RawMessage(` {"a":1}`), ManagedFields: json.RawMessage(`[]`)},
		Lifecycle: nodeapi.Lifecycle{OnTimeout: nodeapi.OnTimeoutPause}}
	for _, tc := range []struct {
		name   string
		change func(r *nodeapi.ClaimRequest)
		status int    // 0: valid
		field  string // what the error names
	}{
		{"valid", func(*nodeapi.ClaimRequest) {}, 0, ""},
		{"nothing but a template", func(r *nodeapi.ClaimRequest) { *r = nodeapi.ClaimRequest{Template: "img:1"} }, 0, ""},
		{"env name empty", func(r *nodeapi.ClaimRequest) { r.Env[""] = "x" }, 400, "env[]"},
		{"env name with =", func(r *nodeapi.ClaimRequest) { r.Env["A=B"] = "x" }, 400, "env[A=B]"},
		{"env name with NUL", func(r *nodeapi.ClaimRequest) { r.Env["A\x00"] = "x" }, 400, "env["},
		{"env name with a newline", func(r *nodeapi.ClaimRequest) { r.Env["A\nB"] = "x" }, 400, "env["},
		{"env name not UTF-8", func(r *nodeapi.ClaimRequest) { r.Env["A\xff"] = "x" }, 400, "env["},
		{"env value with NUL", func(r *nodeapi.ClaimRequest) { r.Env["A"] = "x\x00y" }, 400, "env[A]"},
		{"env value with = and newline is fine", func(r *nodeapi.ClaimRequest) { r.Env["A"] = "x=y\nz" }, 0, ""},
		{"env over MaxEnvVars", func(r *nodeapi.ClaimRequest) { r.Env = many(nodeapi.MaxEnvVars+1, 0) }, 413, "env"},
		{"env at MaxEnvVars", func(r *nodeapi.ClaimRequest) { r.Env = many(nodeapi.MaxEnvVars, 0) }, 0, ""},
		{"env over MaxEnvBytes", func(r *nodeapi.ClaimRequest) {
			r.Env = map[string]string{"A": strings.Repeat("x", nodeapi.MaxEnvBytes)}
		}, 413, "env"},
		{"env at MaxEnvBytes", func(r *nodeapi.ClaimRequest) {
			r.Env = map[string]string{"A": strings.Repeat("x", nodeapi.MaxEnvBytes-1)}
		}, 0, ""},
		{"metadata empty key", func(r *nodeapi.ClaimRequest) { r.Metadata[""] = "x" }, 400, "metadata[]"},
		{"metadata over MaxMetadataKeys", func(r *nodeapi.ClaimRequest) { r.Metadata = many(nodeapi.MaxMetadataKeys+1, 0) }, 413, "metadata"},
		{"metadata over MaxMetadataBytes", func(r *nodeapi.ClaimRequest) {
			r.Metadata = map[string]string{"k": strings.Repeat("x", nodeapi.MaxMetadataBytes)}
		}, 413, "metadata"},
		{"label key invalid", func(r *nodeapi.ClaimRequest) { r.Labels["bad key!"] = "x" }, 400, "labels"},
		{"label value invalid", func(r *nodeapi.ClaimRequest) { r.Labels["ok"] = "not ok!" }, 400, "labels"},
		{"label value too long", func(r *nodeapi.ClaimRequest) { r.Labels["ok"] = strings.Repeat("a", 64) }, 400, "labels"},
		{"annotation key invalid", func(r *nodeapi.ClaimRequest) { r.Annotations["/x"] = "y" }, 400, "annotations"},
		{"object over MaxObjectBytes", func(r *nodeapi.ClaimRequest) { r.Annotations["big"] = strings.Repeat("x", nodeapi.MaxObjectBytes) }, 413, "object"},
		{"managed fields over their bound", func(r *nodeapi.ClaimRequest) {
			r.ManagedFields = json.RawMessage(`["` + strings.Repeat("x", nodeapi.MaxManagedFieldsBytes) + `"]`)
		}, 413, "managed_fields"},
		{"spec not an object", func(r *nodeapi.ClaimRequest) { r.Spec = json.RawMessage(`[1]`) }, 400, "spec"},
		{"spec null", func(r *nodeapi.ClaimRequest) { r.Spec = json.RawMessage(`null`) }, 0, ""},
		{"managed fields not an array", func(r *nodeapi.ClaimRequest) { r.ManagedFields = json.RawMessage(`{}`) }, 400, "managed_fields"},
		{"negative ttl", func(r *nodeapi.ClaimRequest) { r.TTLSeconds = -1 }, 400, "ttl_seconds"},
		{"claim ref without a name", func(r *nodeapi.ClaimRequest) { r.ClaimRef = "ns/" }, 400, "claim_ref"},
		{"claim ref without a slash", func(r *nodeapi.ClaimRequest) { r.ClaimRef = "ns" }, 400, "claim_ref"},
		{"claim ref too long", func(r *nodeapi.ClaimRequest) { r.ClaimRef = "ns/" + strings.Repeat("a", nodeapi.MaxClaimRefBytes) }, 400, "claim_ref"},
		{"claim ref with a control character", func(r *nodeapi.ClaimRequest) { r.ClaimRef = "ns/a\tb" }, 400, "claim_ref"},
		{"on_timeout unknown", func(r *nodeapi.ClaimRequest) { r.OnTimeout = "sleep" }, 400, "on_timeout"},
		{"a bound and a malformed field: 413", func(r *nodeapi.ClaimRequest) {
			r.Metadata = many(nodeapi.MaxMetadataKeys+1, 0)
			r.Metadata[""] = "x"
		}, 413, "metadata"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ok
			r.Env, r.Metadata = clone(ok.Env), clone(ok.Metadata)
			r.Labels, r.Annotations = clone(ok.Labels), clone(ok.Annotations)
			tc.change(&r)
			errs := r.Validate()
			if tc.status == 0 {
				if len(errs) > 0 {
					t.Fatalf("Validate = %v, want none", errs)
				}
				return
			}
			if len(errs) == 0 {
				t.Fatalf("Validate passed, want %d naming %s", tc.status, tc.field)
			}
			if got := nodeapi.ClaimStatus(errs); got != tc.status {
				t.Errorf("ClaimStatus = %d, want %d (%v)", got, tc.status, errs)
			}
			if !strings.HasPrefix(errs[0].Field, tc.field) {
				t.Errorf("first error names %q, want %q (%v)", errs[0].Field, tc.field, errs)
			}
		})
	}
}

func TestSnapshotClaimRequest_ValidateSharesTheClaimsRules(t *testing.T) {
	for _, r := range []nodeapi.SnapshotClaimRequest{{TTLSeconds: -1}, {ClaimRef: "nons"}, {Lifecycle: nodeapi.Lifecycle{OnTimeout: "x"}}, {Metadata: map[string]string{"": "x"}}} {
		if errs := r.Validate(); nodeapi.ClaimStatus(errs) != http.StatusBadRequest || len(errs) != 1 {
			t.Errorf("%+v: Validate = %v, want one 400", r, errs)
		}
	}
	// The metadata's bounds are a claim's (413).
	big := map[string]string{"k": strings.Repeat("v", nodeapi.MaxMetadataBytes)}
	many := make(map[string]string, nodeapi.MaxMetadataKeys+1)
	for i := range nodeapi.MaxMetadataKeys + 1 {
		many[strconv.Itoa(i)] = ""
	}
	for _, m := range []map[string]string{big, many} {
		r := nodeapi.SnapshotClaimRequest{Metadata: m}
		claim := nodeapi.ClaimRequest{Metadata: m}
		if errs, want := r.Validate(), claim.Validate(); nodeapi.ClaimStatus(errs) != http.StatusRequestEntityTooLarge || errs.ToAggregate().Error() != want.ToAggregate().Error() {
			t.Errorf("metadata of %d keys: Validate = %v, want a claim's %v (413)", len(m), errs, want)
		}
	}
	if errs := (&nodeapi.SnapshotClaimRequest{ClaimRef: "ns/a", TTLSeconds: 5, Metadata: map[string]string{"a": "b"}}).Validate(); len(errs) > 0 {
		t.Errorf("valid snapshot claim: %v", errs)
	}
}

func clone(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}
