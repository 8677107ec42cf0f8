package nodeapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hearthvm/hearth/nodeapi"
)

// A fake node: the client speaks the routes and JSON names the package
// documents, and a node's error answers become values callers branch on.
func TestClient_RoutesJSONAndErrors(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.RequestURI())
		if r.Header.Get("Authorization") != "Bearer tok" {
			t.Errorf("%s %s without the bearer token", r.Method, r.URL)
		}
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/claim":
			var req map[string]any
			_ = json.NewDecoder(r.Body).Decode(&req)
			if req["claim_ref"] != "ns/a" || req["ttl_seconds"] != float64(60) {
				t.Errorf("claim body %v", req)
			}
			_, _ = w.Write([]byte(`{"id":"sb_1","node":"n1","template":"img","net":"none","size":"small","claim_ref":"ns/a","agent_addr":"10.0.0.1:49983","token":"t","deadline":"2026-01-01T00:05:00Z","claimed_at":"2026-01-01T00:00:00Z","paused":false}`))
		case "/v1/sandboxes/sb_1/pause", "/v1/sandboxes/sb_1/resume":
			w.WriteHeader(http.StatusNoContent)
		case "/v1/sandboxes/sb_1/labels":
			var req map[string]any
			_ = json.NewDecoder(r.Body).Decode(&req)
			if req["version"] != float64(3) || req["labels"].(map[string]any)["team"] != "a" || req["managed_fields"] == nil {
				t.Errorf("labels body %v", req)
			}
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"error":"sandbox sb_1 is at version 4, not 3"}`))
		case "/v1/sandboxes/sb_gone":
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":"sandbox not found"}`))
		case "/v1/snapshots/sn_1/claim":
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"error":"busy"}`))
		default:
			w.WriteHeader(http.StatusTeapot)
		}
	}))
	defer srv.Close()
	c := nodeapi.NewClient(srv.URL, "tok")
	ctx := context.Background()

	s, err := c.Claim(ctx, nodeapi.ClaimRequest{Template: "img", TTLSeconds: 60, ClaimRef: "ns/a"})
	if err != nil || s.ID != "sb_1" || s.Node != "n1" || s.AgentAddr != "10.0.0.1:49983" || s.Token != "t" || s.Deadline.IsZero() || s.Key().Size != "small" {
		t.Fatalf("Claim = %+v, %v", s, err)
	}
	if err := c.Pause(ctx, "sb_1"); err != nil {
		t.Fatal(err)
	}
	if err := c.Resume(ctx, "sb_1"); err != nil {
		t.Fatal(err)
	}
	_, err = c.SetLabels(ctx, "sb_1", nodeapi.LabelsRequest{Labels: map[string]string{"team": "a"}, ManagedFields: json.RawMessage(`[]`), Version: 3})
	if !errors.Is(err, nodeapi.ErrConflict) || nodeapi.NotDelivered(err) {
		t.Fatalf("SetLabels(stale) = %v; want a 409 matching ErrConflict", err)
	}
	_, err = c.Get(ctx, "sb_gone")
	if !errors.Is(err, nodeapi.ErrNotFound) || nodeapi.StatusOf(err) != 404 || nodeapi.NotDelivered(err) {
		t.Fatalf("Get(gone) = %v; want a 404 matching ErrNotFound", err)
	}
	_, err = c.ClaimSnapshot(ctx, "sn_1", 0)
	if !errors.Is(err, nodeapi.ErrNoCapacity) || !nodeapi.NotDelivered(err) {
		t.Fatalf("ClaimSnapshot = %v; want a 429 matching ErrNoCapacity, not delivered", err)
	}
	want := []string{"POST /v1/claim", "POST /v1/sandboxes/sb_1/pause", "POST /v1/sandboxes/sb_1/resume",
		"PUT /v1/sandboxes/sb_1/labels", "GET /v1/sandboxes/sb_gone", "POST /v1/snapshots/sn_1/claim"}
	if len(got) != len(want) {
		t.Fatalf("requests %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d = %q, want %q", i, got[i], want[i])
		}
	}
}
