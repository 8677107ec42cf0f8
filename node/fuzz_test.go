package node

import (
	"net/http"
	"testing"

	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
)

// The request decoders never panic, answer 400 for everything they refuse
// (413 for a claim past a bound of nodeapi.ClaimRequest.Validate), and
// only accept normalized, valid input. Seeds: testdata/fuzz/.
func FuzzParseClaim(f *testing.F) {
	for _, s := range []string{`{"template":"img"}`, `{"template":"img","net":"egress","size":"large","ttl_seconds":5,"claim_ref":"a/b","env":{"A":"1"},"metadata":{"k":"v"}}`, `{`, `null`, `{"template":"img","ttl_seconds":-1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		in, err := parseClaim(b)
		if err != nil {
			if s := statusOf(err); s != http.StatusBadRequest && s != http.StatusRequestEntityTooLarge {
				t.Fatalf("status %d for %q", statusOf(err), b)
			}
			return
		}
		checkKey(t, in.key)
		if errs := (&nodeapi.ClaimRequest{TTLSeconds: in.ttl, ClaimRef: in.ref, Env: in.env, Metadata: in.metadata, Object: in.object, Lifecycle: in.life}).Validate(); len(errs) > 0 {
			t.Fatalf("accepted %+v", in)
		}
	})
}

func FuzzParsePools(f *testing.F) {
	for _, s := range []string{`{"pools":[]}`, `{"pools":[{"template":"a","warm":3},{"template":"a","net":"egress","warm":1}]}`, `{"pools":[{"template":"a","warm":1},{"template":"a","net":"none","warm":1}]}`, `{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ts, err := parsePools(b)
		if err != nil {
			if statusOf(err) != http.StatusBadRequest {
				t.Fatalf("status %d for %q", statusOf(err), b)
			}
			return
		}
		seen := map[pool.Key]bool{}
		for _, p := range ts {
			k := pool.Key{Template: p.Template, Net: p.Net, Size: p.Size}
			checkKey(t, k)
			if seen[k] || p.Warm < 0 {
				t.Fatalf("accepted %+v", ts)
			}
			seen[k] = true
		}
	})
}

func checkKey(t *testing.T, k pool.Key) {
	t.Helper()
	if k.Template == "" || (k.Net != "none" && k.Net != "egress") || (k.Size != "small" && k.Size != "medium" && k.Size != "large") {
		t.Fatalf("accepted key %+v", k)
	}
}

// FuzzParseRequests covers the other body decoders: fork, snapshot and the
// ttl bodies of renew and snapshot claims.
func FuzzParseRequests(f *testing.F) {
	for _, s := range []string{`{"count":3,"ttl_seconds":60}`, `{"count":17}`, `{"name":"first","keep":true}`, `{"name":"a\u0000"}`, `{"ttl_seconds":30}`, `{"ttl_seconds":-5}`, ``, `[]`, `{"count":1}{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		bad := func(what string, err error) bool {
			if err != nil && statusOf(err) != http.StatusBadRequest {
				t.Fatalf("%s: status %d for %q", what, statusOf(err), b)
			}
			return err != nil
		}
		if count, ttl, err := parseFork(b); !bad("fork", err) && (count < 1 || count > MaxForkCount || ttl < 0) {
			t.Fatalf("fork accepted count %d ttl %d", count, ttl)
		}
		if name, _, err := parseSnapshot(b); !bad("snapshot", err) && len(name) > maxNameLen {
			t.Fatalf("snapshot accepted a %d-byte name", len(name))
		}
		for _, allowEmpty := range []bool{false, true} {
			if ttl, err := parseTTLBody(b, allowEmpty); !bad("ttl", err) && ttl < 0 {
				t.Fatalf("ttl accepted %d", ttl)
			}
		}
	})
}
