package agent

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hearthvm/hearth/agentapi"
)

func TestIdentity_NewTokenReplacesTheOld(t *testing.T) {
	a := newAgent(Options{Token: "golden", Root: t.TempDir()})
	srv := httptest.NewServer(a)
	t.Cleanup(func() { a.killAll(); srv.Close() })
	post := func(tok, body string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+agentapi.IdentityPath, strings.NewReader(body))
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

func TestIdentity_PersistsToTokenFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte("golden"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := newAgent(Options{Token: "golden", TokenFile: file, Root: dir})
	srv := httptest.NewServer(a)
	t.Cleanup(func() { a.killAll(); srv.Close() })
	req, _ := http.NewRequest(http.MethodPost, srv.URL+agentapi.IdentityPath, strings.NewReader(`{"token":"clone-1"}`))
	req.Header.Set("X-Access-Token", "golden")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("set identity: %d", resp.StatusCode)
	}
	b, err := os.ReadFile(file)
	if err != nil || string(b) != "clone-1" {
		t.Fatalf("token file = %q, %v; want clone-1 (a restarted agent would fall back)", b, err)
	}
	if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode %v, want 0600", fi.Mode().Perm())
	}
}
