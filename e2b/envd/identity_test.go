package envd

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestIdentity_NewTokenReplacesTheOld(t *testing.T) {
	a := newAgent(Options{Token: "golden", Root: t.TempDir()})
	srv := httptest.NewServer(a)
	t.Cleanup(func() { a.killAll(); srv.Close() })
	post := func(tok, body string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+IdentityPath, strings.NewReader(body))
		req.Header.Set("X-Access-Token", tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := post("wrong", `{"token":"x"}`); got != http.StatusUnauthorized {
		t.Fatalf("wrong token: status %d, want 401", got)
	}
	if got := post("golden", `{"token":""}`); got != http.StatusBadRequest {
		t.Fatalf("empty token: status %d, want 400", got)
	}
	if got := post("golden", `{"token":"clone-1"}`); got != http.StatusNoContent {
		t.Fatalf("set identity: status %d, want 204", got)
	}
	if got := post("golden", `{"token":"again"}`); got != http.StatusUnauthorized {
		t.Fatalf("old token after identity change: status %d, want 401", got)
	}
	if got := post("clone-1", `{"token":"clone-2"}`); got != http.StatusNoContent {
		t.Fatalf("new token: status %d, want 204", got)
	}
}
