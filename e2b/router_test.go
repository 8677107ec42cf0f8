package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
)

// refsOf finds the fake's sandboxes by claim ref, without tokens (like the view).
type refsOf struct{ f *fakeFleet }

// KnownByRef is ByRef for a ref the fake's view names; any other ref
// costs no node call.
func (r refsOf) KnownByRef(ctx context.Context, ref string) (nodeapi.Sandbox, error) {
	r.f.mu.Lock()
	known := false
	for _, s := range r.f.sandboxes {
		known = known || s.loc.ClaimRef == ref
	}
	r.f.mu.Unlock()
	if !known {
		return nodeapi.Sandbox{}, fleet.ErrNotFound
	}
	return r.ByRef(ctx, ref)
}

// ByRef asks the fake's node (counted in lookups, as a fan-out would be).
func (r refsOf) ByRef(_ context.Context, ref string) (nodeapi.Sandbox, error) {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	r.f.lookups++
	for _, s := range r.f.sandboxes {
		if s.loc.ClaimRef == ref {
			l := s.loc
			l.Token, l.AgentAddr = "", ""
			return l, nil
		}
	}
	return nodeapi.Sandbox{}, fleet.ErrNotFound
}

// authz admits exactly the bearer tokens it holds, for any sandbox and
// subresource.
type authz map[string]bool

func (a authz) AuthorizeSandbox(_ context.Context, bearer, _, _, _ string) (bool, error) {
	return a[bearer], nil
}

// grants admits a bearer token for the subresources listed for it.
type grants map[string][]string

func (a grants) AuthorizeSandbox(_ context.Context, bearer, _, _, sub string) (bool, error) {
	for _, s := range a[bearer] {
		if s == sub {
			return true, nil
		}
	}
	return false, nil
}

func routerGateway(t *testing.T, a SandboxAuthorizer) (*httptest.Server, nodeapi.Sandbox) {
	t.Helper()
	f := newFakeFleet(t)
	f.addWarm("tmpl", 1)
	k, _ := pool.KeyForE2B("tmpl", false)
	sb, err := f.Claim(context.Background(), nodeapi.ClaimRequest{Template: k.Template, Net: k.Net, Size: k.Size, ClaimRef: "team/demo", Env: map[string]string{"WHO": "claim"}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(Config{Fleet: f, APIKeys: []string{"k"}, Refs: refsOf{f}, Authorizer: a})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, sb
}

func routed(t *testing.T, srv *httptest.Server, method, path, name, bearer string, body io.Reader, ctype string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+path, body)
	req.Header.Set(HeaderSandboxID, name)
	req.Header.Set(HeaderSandboxNamespace, "team")
	req.Header.Set(HeaderSandboxPort, "8888")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func TestRouter_Authorization(t *testing.T) {
	srv, sb := routerGateway(t, authz{"kube-alice": true})
	exec := func(name, bearer string) int {
		code, _ := routed(t, srv, "POST", "/execute", name, bearer, strings.NewReader(`{"command":"true"}`), "application/json")
		return code
	}
	for _, tc := range []struct {
		what, name, bearer string
		want               int
	}{
		{"the sandbox's own token", "demo", sb.Token, 200},
		{"a Kubernetes token the API authorizes", "demo", "kube-alice", 200},
		{"a token the API refuses", "demo", "kube-mallory", 403},
		{"no credential", "demo", "", 401},
		{"an unknown name, refused: no existence leak", "ghost", "kube-mallory", 403},
		{"an unknown name, another sandbox's token: no existence leak", "ghost", sb.Token, 403},
		{"an unknown name, authorized", "ghost", "kube-alice", 404},
		{"a name that is not a DNS subdomain", "Not_A_Name", "kube-alice", 400},
	} {
		if got := exec(tc.name, tc.bearer); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.what, got, tc.want)
		}
	}
}

func TestRouter_RuntimeAPI(t *testing.T) {
	srv, sb := routerGateway(t, nil)
	code, b := routed(t, srv, "POST", "/execute", "demo", sb.Token, strings.NewReader(`{"command":"echo $WHO; echo e >&2; exit 7"}`), "application/json")
	var res struct {
		Stdout, Stderr string
		ExitCode       int `json:"exit_code"`
	}
	if err := json.Unmarshal(b, &res); code != 200 || err != nil || res.Stdout != "claim\n" || res.Stderr != "e\n" || res.ExitCode != 7 {
		t.Fatalf("execute: %d %s", code, b)
	}

	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	part, _ := mw.CreateFormFile("file", "dir/a b.txt")
	part.Write([]byte("payload"))
	mw.Close()
	if code, b := routed(t, srv, "POST", "/upload", "demo", sb.Token, &body, mw.FormDataContentType()); code != 200 {
		t.Fatalf("upload: %d %s", code, b)
	}
	if code, b := routed(t, srv, "GET", "/download/dir%2Fa%20b.txt", "demo", sb.Token, nil, ""); code != 200 || string(b) != "payload" {
		t.Fatalf("download: %d %q", code, b)
	}
	if code, b := routed(t, srv, "GET", "/exists/dir%2Fa%20b.txt", "demo", sb.Token, nil, ""); code != 200 || !strings.Contains(string(b), `"exists":true`) {
		t.Fatalf("exists: %d %s", code, b)
	}
	if code, b := routed(t, srv, "GET", "/exists/nope", "demo", sb.Token, nil, ""); code != 200 || !strings.Contains(string(b), `"exists":false`) {
		t.Fatalf("exists nope: %d %s", code, b)
	}
	code, b = routed(t, srv, "GET", "/list/dir", "demo", sb.Token, nil, "")
	var entries []struct {
		Name string
		Size int64
		Type string
	}
	if err := json.Unmarshal(b, &entries); code != 200 || err != nil || len(entries) != 1 || entries[0].Name != "a b.txt" || entries[0].Type != "file" || entries[0].Size != 7 {
		t.Fatalf("list: %d %s", code, b)
	}
	if code, _ := routed(t, srv, "GET", "/download/nope", "demo", sb.Token, nil, ""); code != 404 {
		t.Fatalf("download of a missing file: %d", code)
	}
}

// TestRouter_RunningCodeNeedsExecOrPortForward: a grant to read sandboxes
// runs nothing. The runtime port (every path of its API) needs `create
// sandboxes/exec`, any other port `create sandboxes/portforward`; neither
// grant opens the other; the sandbox's own token opens both.
func TestRouter_RunningCodeNeedsExecOrPortForward(t *testing.T) {
	srv, _, sb := routerGatewayF(t, grants{
		"kube-viewer": {}, "kube-exec": {SubresourceExec}, "kube-pf": {SubresourcePortForward},
		"kube-both": {SubresourceExec, SubresourcePortForward},
	})
	app := echoApp(t)
	call := func(method, path, port, bearer string) (int, string) {
		hdr := map[string]string{HeaderSandboxID: "demo", HeaderSandboxNamespace: "team", HeaderSandboxPort: port, "Authorization": "Bearer " + bearer}
		return send(t, srv.URL, method, path, "", hdr)
	}
	for _, tc := range []struct {
		bearer           string
		runtime, forward int
	}{
		{"kube-viewer", 403, 403}, {"kube-exec", 200, 403}, {"kube-pf", 403, 200}, {"kube-both", 200, 200}, {sb.Token, 200, 200},
	} {
		for _, p := range []struct{ method, path string }{
			{"POST", "/execute"}, {"POST", "/upload"}, {"GET", "/download/x"}, {"GET", "/list/."}, {"GET", "/exists/x"},
		} {
			status, body := call(p.method, p.path, "8888", tc.bearer)
			if tc.runtime == 403 {
				requireJSONError(t, http.StatusForbidden, status, []byte(body))
				require.Contains(t, body, "sandboxes/exec")
			} else {
				require.NotEqual(t, http.StatusForbidden, status, "%s %s %s: %s", tc.bearer, p.method, p.path, body)
				require.NotEqual(t, http.StatusUnauthorized, status, "%s %s %s: %s", tc.bearer, p.method, p.path, body)
			}
		}
		status, body := call("GET", "/page", app, tc.bearer)
		if tc.forward == 403 {
			requireJSONError(t, http.StatusForbidden, status, []byte(body))
			require.Contains(t, body, "sandboxes/portforward")
		} else {
			require.Equal(t, http.StatusOK, status, body)
			require.Equal(t, "app /page internal=", body)
		}
	}
}

// failingAuthz is an authorizer whose backend (TokenReview,
// SubjectAccessReview) does not answer.
type failingAuthz struct{}

func (failingAuthz) AuthorizeSandbox(context.Context, string, string, string, string) (bool, error) {
	return false, errors.New("tokenreviews: connection refused")
}

// TestRouter_AuthorizerDownIs503WithRetryAfter: when the authorizer
// cannot decide (its backend is unavailable), a Kubernetes bearer gets 503
// with Retry-After — not a 500 — and, for an existing and a missing name
// alike, the same answer; the sandbox's own token still opens it.
func TestRouter_AuthorizerDownIs503WithRetryAfter(t *testing.T) {
	srv, sb := routerGateway(t, failingAuthz{})
	call := func(name, bearer string) (int, http.Header, string) {
		req, _ := http.NewRequest("POST", srv.URL+"/execute", strings.NewReader(`{"command":"true"}`))
		req.Header.Set(HeaderSandboxID, name)
		req.Header.Set(HeaderSandboxNamespace, "team")
		req.Header.Set("Content-Type", "application/json")
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	for _, name := range []string{"demo", "ghost"} {
		for _, bearer := range []string{"kube-alice", ""} {
			status, hdr, body := call(name, bearer)
			requireJSONError(t, http.StatusServiceUnavailable, status, []byte(body))
			require.Equal(t, "1", hdr.Get("Retry-After"), "%s %q", name, bearer)
			require.NotContains(t, body, "connection refused", "the backend's error stays in the log")
		}
	}
	status, _, body := call("demo", sb.Token)
	require.Equal(t, http.StatusOK, status, "the sandbox's own token does not need the authorizer: %s", body)
}
