package node

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hearthvm/hearth/agent"
	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/vmm/vmmtest"
)

// runInAgent runs bash -c script through the agent at url (envd's
// process.Process/Start, Connect JSON) and reads its stream to the end.
func runInAgent(t *testing.T, url, script string) {
	t.Helper()
	msg, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-c", script}}})
	body := append([]byte{0, 0, 0, 0, 0}, msg...)
	binary.BigEndian.PutUint32(body[1:5], uint32(len(msg)))
	resp, err := http.Post(url+"/process.Process/Start", "application/connect+json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != 200 {
		t.Fatalf("start: %d %v", resp.StatusCode, err)
	}
}

// GET /v1/sandboxes/{id}/logs is the agent's log, for root and the
// sandbox's own token only; a paused sandbox is a 409, an agent that does
// not answer a 502, a bad query a 400 — and the claim's env is not in it.
func TestLogs_NodeServesTheAgentsLog(t *testing.T) {
	srv := httptest.NewServer(agent.NewHandler(agent.Options{Root: t.TempDir()}))
	t.Cleanup(srv.Close)
	drv := vmmtest.New(vmmtest.Options{Name: "fake", Addr: srv.Listener.Addr().String()})
	tn := startNode(t, drv, nil)
	if _, err := tn.root.PutPools(bg, pools("img", 2)); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 2)
	a, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/a", Env: map[string]string{"CLAIM_SECRET": "claim-secret-value"}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/b"})
	if err != nil {
		t.Fatal(err)
	}
	runInAgent(t, srv.URL, "echo one; echo two")

	l, err := tn.root.Logs(bg, a.ID, agentapi.LogsQuery{Tail: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Entries) != 2 || l.Entries[0].Message != "two" || l.Entries[1].Event != agentapi.LogExit {
		t.Fatalf("tail 2: %+v", l.Entries)
	}
	own := nodeapi.NewClient(strings.TrimPrefix(tn.srv.URL, "http://"), a.Token)
	if l, err := own.Logs(bg, a.ID, agentapi.LogsQuery{}); err != nil || len(l.Entries) != 4 || strings.Contains(fmtJSON(l), "claim-secret-value") {
		t.Fatalf("own token: %+v %v", l, err)
	}
	u := tn.srv.URL + "/v1/sandboxes/" + a.ID + "/logs"
	for _, c := range []struct {
		name, url, token string
		want             int
	}{
		{"other sandbox's token", u, b.Token, 404},
		{"no token", u, "", 401},
		{"bad limit", u + "?limit=-1", testRoot, 400},
		{"unknown sandbox", tn.srv.URL + "/v1/sandboxes/sb_nope/logs", testRoot, 404},
	} {
		if code, body := rawDo(t, "GET", c.url, c.token, ""); code != c.want {
			t.Fatalf("%s: %d %s, want %d", c.name, code, body, c.want)
		}
	}
	if err := tn.root.Pause(bg, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := tn.root.Logs(bg, a.ID, agentapi.LogsQuery{}); nodeapi.StatusOf(err) != http.StatusConflict {
		t.Fatalf("paused: %v, want 409", err)
	}

	// An agent that does not answer: 502.
	down := startNode(t, newFakeDriver(), nil)
	if _, err := down.root.PutPools(bg, pools("img", 1)); err != nil {
		t.Fatal(err)
	}
	down.waitWarm(t, "img", 1)
	c, err := down.root.Claim(bg, nodeapi.ClaimRequest{Template: "img"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := down.root.Logs(bg, c.ID, agentapi.LogsQuery{}); nodeapi.StatusOf(err) != http.StatusBadGateway {
		t.Fatalf("agent down: %v, want 502", err)
	}
}

func fmtJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
