package e2b

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/fleetview"
	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/sandbox"
)

// startWithin posts process.Process/Start for cmd to sandbox id through
// the gateway and returns the answer's status and body's start, or the
// error when none came within d (a request that hangs).
func startWithin(url, id, token, cmd string, d time.Duration) (int, string, error) {
	msg, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-c", cmd}}})
	env := append([]byte{0, 0, 0, 0, 0}, msg...)
	binary.BigEndian.PutUint32(env[1:5], uint32(len(msg)))
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/process.Process/Start", bytes.NewReader(env))
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("E2b-Sandbox-Port", "49983")
	req.Header.Set("X-Access-Token", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(b), err
}

// TestDataPlane_PauseThroughAnotherFleetEndsTheCachedRoute: a sandbox
// paused by another process (the Kubernetes API's pause, another replica:
// here another fleet over the same live view) while this gateway holds its
// route cached answers its next data-plane request at once, as any paused
// sandbox does — e2b's 502 "paused", or, created with autoResume, resumed
// by the request — instead of the request going to the paused VM's agent
// and hanging until a resume. The gateway's clock stands still, so the
// cached routes never expire on their own.
func TestDataPlane_PauseThroughAnotherFleetEndsTheCachedRoute(t *testing.T) {
	if testing.Short() {
		t.Skip("boots sandbox-agent processes")
	}
	view := newNodeView(t)
	h, err := New(Config{Fleet: fleet.New(fleet.Config{View: view, Secret: sdkRootToken}), APIKeys: []string{apiKey}})
	require.NoError(t, err)
	frozen := time.Now()
	h.(*gateway).now = func() time.Time { return frozen }
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	g := &gw{t: t, url: srv.URL}
	other := fleet.New(fleet.Config{View: view, Secret: sdkRootToken})
	live := view.(*fleetview.Live)

	plain := g.create(map[string]any{"templateID": sdkTemplate})
	resuming := g.create(map[string]any{"templateID": sdkTemplate, "autoPause": true, "autoResume": map[string]any{"enabled": true}})
	for _, s := range []sandboxJSON{plain, resuming} {
		status, _, err := startWithin(srv.URL, s.SandboxID, *s.EnvdAccessToken, "true", 30*time.Second)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, status, "the route is cached")

		// Paused elsewhere; this gateway's view learns it from the node.
		var rec nodeapi.Sandbox
		for _, c := range idCandidates(s.SandboxID) {
			if rec, err = other.KnownByID(context.Background(), c); err == nil {
				break
			}
		}
		require.NoError(t, err)
		require.NoError(t, other.Pause(context.Background(), rec))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		require.True(t, live.AwaitID(ctx, rec.ID, func(v inventory.Versioned, ok bool) bool {
			return ok && v.Entry.Phase == sandbox.PhasePaused
		}), "the view never showed the pause")
		cancel()
	}

	status, body, err := startWithin(srv.URL, plain.SandboxID, *plain.EnvdAccessToken, "true", 10*time.Second)
	require.NoError(t, err, "a request to a sandbox paused elsewhere must not hang")
	require.Equal(t, http.StatusBadGateway, status, body)
	require.Contains(t, body, "paused")

	status, body, err = startWithin(srv.URL, resuming.SandboxID, *resuming.EnvdAccessToken, "echo resumed", 10*time.Second)
	require.NoError(t, err, "a request to an autoResume sandbox paused elsewhere must not hang")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "cmVzdW1lZA", "the process ran (its stdout, base64)")
}
