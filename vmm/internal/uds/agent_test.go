package uds

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/vmm"
)

// seen is what an agent stub received.
type seen struct {
	method, path, token string
	body                map[string]any
}

// agentStub answers every request with status and records it.
func agentStub(t *testing.T, status int) (addr string, got *[]seen) {
	t.Helper()
	var reqs []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := seen{method: r.Method, path: r.URL.Path, token: r.Header.Get(agentapi.AccessTokenHeader)}
		_ = json.NewDecoder(r.Body).Decode(&s.body)
		reqs = append(reqs, s)
		w.WriteHeader(status)
		_, _ = w.Write([]byte("refused"))
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), &reqs
}

// A re-key is POST agentapi.IdentityPath with the old token: an agent
// without the route (404, 405) keeps the old token without an error, any
// other refusal is an error.
func TestRekey_AgentWithoutIdentityKeepsOldTokenOtherRefusalsFail(t *testing.T) {
	for _, tc := range []struct {
		status  int
		ok, err bool
	}{
		{http.StatusNoContent, true, false},
		{http.StatusOK, true, false},
		{http.StatusNotFound, false, false},
		{http.StatusMethodNotAllowed, false, false},
		{http.StatusUnauthorized, false, true},
		{http.StatusBadRequest, false, true},
		{http.StatusInternalServerError, false, true},
	} {
		addr, got := agentStub(t, tc.status)
		ok, err := Rekey(context.Background(), addr, "old", "new")
		if ok != tc.ok || (err != nil) != tc.err {
			t.Errorf("agent answering %d: Rekey = %v, %v; want %v, error %v", tc.status, ok, err, tc.ok, tc.err)
		}
		if tc.err && agentapi.StatusOf(err) != tc.status {
			t.Errorf("agent answering %d: the error %v does not carry the status", tc.status, err)
		}
		if len(*got) != 1 {
			t.Fatalf("agent answering %d: %d requests, want 1", tc.status, len(*got))
		}
		if r := (*got)[0]; r.method != http.MethodPost || r.path != agentapi.IdentityPath || r.token != "old" || r.body["token"] != "new" {
			t.Errorf("agent answering %d: request %+v", tc.status, r)
		}
	}
}

// The same token is no re-key: nothing is sent.
func TestRekey_SameTokenSendsNothing(t *testing.T) {
	addr, got := agentStub(t, http.StatusInternalServerError)
	if ok, err := Rekey(context.Background(), addr, "t", "t"); !ok || err != nil || len(*got) != 0 {
		t.Fatalf("Rekey(t, t) = %v, %v after %d requests", ok, err, len(*got))
	}
}

// /init carries the env with the token; an agent without /init (404) is
// tolerated, any other refusal is an error, an empty env sends nothing.
func TestInitEnv_AgentWithoutInitIsToleratedOtherRefusalsFail(t *testing.T) {
	for _, tc := range []struct {
		status int
		err    bool
	}{
		{http.StatusNoContent, false},
		{http.StatusNotFound, false},
		{http.StatusMethodNotAllowed, true},
		{http.StatusUnauthorized, true},
		{http.StatusRequestEntityTooLarge, true},
	} {
		addr, got := agentStub(t, tc.status)
		err := InitEnv(context.Background(), addr, "tok", map[string]string{"A": "1,2"})
		if (err != nil) != tc.err {
			t.Errorf("agent answering %d: InitEnv = %v, want error %v", tc.status, err, tc.err)
		}
		if len(*got) != 1 {
			t.Fatalf("agent answering %d: %d requests, want 1", tc.status, len(*got))
		}
		r := (*got)[0]
		env, _ := r.body["envVars"].(map[string]any)
		if r.method != http.MethodPost || r.path != agentapi.InitPath || r.token != "tok" || env["A"] != "1,2" {
			t.Errorf("agent answering %d: request %+v", tc.status, r)
		}
	}
	addr, got := agentStub(t, http.StatusInternalServerError)
	if err := InitEnv(context.Background(), addr, "tok", nil); err != nil || len(*got) != 0 {
		t.Fatalf("InitEnv(nil) = %v after %d requests", err, len(*got))
	}
}

// WaitAgent returns once /health answers 2xx, and gives up, with the
// agent's answer, when ctx ends first.
func TestWaitAgent_ReturnsOnHealthyGivesUpAtDeadline(t *testing.T) {
	addr, got := agentStub(t, http.StatusNoContent)
	if err := WaitAgent(context.Background(), addr, nil); err != nil {
		t.Fatal(err)
	}
	if len(*got) != 1 || (*got)[0].method != http.MethodGet || (*got)[0].path != agentapi.HealthPath || (*got)[0].token != "" {
		t.Fatalf("requests %+v", *got)
	}
	addr, _ = agentStub(t, http.StatusServiceUnavailable)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := WaitAgent(ctx, addr, nil); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("an agent answering 503: WaitAgent = %v", err)
	}
}

// A VMM that exits ends the wait for its agent at once, not at the
// caller's deadline (the start timeout: 30 s by default).
func TestWaitAgent_VMMExitEndsTheWaitAtOnce(t *testing.T) {
	addr, _ := agentStub(t, http.StatusServiceUnavailable)
	exited := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	time.AfterFunc(50*time.Millisecond, func() { close(exited) })
	start := time.Now()
	err := WaitAgent(ctx, addr, exited)
	if err == nil || !errors.Is(err, vmm.ErrVMMExited) {
		t.Fatalf("WaitAgent after the VMM exited = %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("WaitAgent returned %v after the VMM exited, at the caller's deadline", d)
	}
}
