package agent

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/hearthvm/hearth/agentapi"
)

func TestParseVMStatOOMKill(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		want    uint64
		wantErr error // nil: no error; errAny: some error
	}{
		{"counter", "pgfault 12\noom_kill 3\nnr_free_pages 9\n", 3, nil},
		{"zero", "oom_kill 0\n", 0, nil},
		{"no counter (kernel before 4.13)", "pgfault 12\nnr_free_pages 9\n", 0, errNoOOMKill},
		{"a longer name is not it", "oom_kill_foo 5\n", 0, errNoOOMKill},
		{"not a count", "oom_kill -1\n", 0, errAny},
		{"empty", "", 0, errNoOOMKill},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseVMStatOOMKill([]byte(tc.in))
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("err %v", err)
			case tc.wantErr == errAny && err == nil, tc.wantErr != nil && tc.wantErr != errAny && !errors.Is(err, tc.wantErr):
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			case err == nil && got != tc.want:
				t.Fatalf("got %d, want %d", got, tc.want)
			}
		})
	}
}

var errAny = errors.New("any error")

func getOOMKills(t *testing.T, url, token string) (int, agentapi.OOMKills) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url+agentapi.OOMKillsPath, nil)
	if token != "" {
		req.Header.Set(agentapi.AccessTokenHeader, token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out agentapi.OOMKills
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode, out
}

func TestOOMKills_AnswersTheVMStatCounter(t *testing.T) {
	srv := httptest.NewServer(oomKillsHandler(filepath.Join("testdata", "vmstat")))
	t.Cleanup(srv.Close)
	if code, got := getOOMKills(t, srv.URL, ""); code != http.StatusOK || got.OOMKills != 7 {
		t.Fatalf("status %d, %+v; want 200 and 7 (testdata/vmstat)", code, got)
	}
	none := filepath.Join(t.TempDir(), "vmstat")
	if err := os.WriteFile(none, []byte("pgfault 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv2 := httptest.NewServer(oomKillsHandler(none))
	t.Cleanup(srv2.Close)
	if code, _ := getOOMKills(t, srv2.URL, ""); code != http.StatusNotImplemented {
		t.Fatalf("vmstat without oom_kill: status %d, want 501", code)
	}
}

// The count is the node's: the token is required, and a held agent
// (Options.Hold) answers it before the node opened it, as its other
// internal paths.
func TestOOMKills_NeedsTheTokenAndIsNotHeld(t *testing.T) {
	if _, err := readOOMKills(vmstatPath); err != nil {
		t.Skipf("this kernel's %s: %v", vmstatPath, err)
	}
	a := newAgent(Options{Token: "golden", Root: t.TempDir(), Hold: true})
	srv := httptest.NewServer(a)
	t.Cleanup(func() { a.killAll(); srv.Close() })
	if code, _ := getOOMKills(t, srv.URL, ""); code != http.StatusUnauthorized {
		t.Fatalf("without the token: status %d, want 401", code)
	}
	if code, _ := getOOMKills(t, srv.URL, "wrong"); code != http.StatusUnauthorized {
		t.Fatalf("wrong token: status %d, want 401", code)
	}
	if code, _ := getOOMKills(t, srv.URL, "golden"); code != http.StatusOK {
		t.Fatalf("with the token, before the node opened the agent: status %d, want 200", code)
	}
	c := &agentapi.Client{Addr: srv.Listener.Addr().String(), Token: "golden"}
	if _, err := c.OOMKills(t.Context()); err != nil {
		t.Fatalf("agentapi.Client.OOMKills: %v", err)
	}
	c.Token = "wrong"
	if _, err := c.OOMKills(t.Context()); agentapi.StatusOf(err) != http.StatusUnauthorized {
		t.Fatalf("agentapi.Client.OOMKills with a wrong token: %v, want a 401", err)
	}
}
