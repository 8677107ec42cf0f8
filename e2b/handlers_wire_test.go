package e2b

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHandlers_ErrorAnswersAndCheckOrder pins the status codes, messages and
// check order of the sandbox verbs' error answers.
func TestHandlers_ErrorAnswersAndCheckOrder(t *testing.T) {
	g := startGateway(t)
	id := g.create(map[string]any{"templateID": "rt"}).SandboxID
	errOf := func(method, path string, body any) apiError {
		t.Helper()
		resp, b := g.call(method, path, body, nil)
		var e apiError
		require.NoError(t, json.Unmarshal(b, &e), string(b))
		require.Equal(t, resp.StatusCode, e.Code)
		return e
	}

	// Body checks come before the lookup.
	require.Equal(t, apiError{http.StatusBadRequest, "timeout must be >= 0, got -1"},
		errOf("POST", "/v2/sandboxes", map[string]any{"templateID": "rt", "timeout": -1}))
	require.Equal(t, apiError{http.StatusBadRequest, "timeout must be >= 0"},
		errOf("POST", "/sandboxes/nope/fork", map[string]any{"timeout": -1}))
	require.Equal(t, apiError{http.StatusBadRequest, "timeout must be >= 0"},
		errOf("POST", "/sandboxes/nope/connect", map[string]any{"timeout": -1}))
	require.Equal(t, apiError{http.StatusBadRequest, "timeout (seconds, >= 0) is required"},
		errOf("POST", "/sandboxes/nope/timeout", map[string]any{}))

	for _, v := range []struct{ method, path string }{
		{"GET", ""}, {"DELETE", ""}, {"POST", "/timeout"}, {"POST", "/refreshes"}, {"POST", "/pause"},
		{"POST", "/connect"}, {"POST", "/resume"}, {"POST", "/fork"}, {"POST", "/snapshots"}, {"GET", "/metrics"},
	} {
		body := map[string]any{"timeout": 1}
		if v.method == "GET" || v.method == "DELETE" {
			body = nil
		}
		require.Equal(t, apiError{http.StatusNotFound, `sandbox "nope" not found`},
			errOf(v.method, "/sandboxes/nope"+v.path, body), v.method+" "+v.path)
	}

	// memory:false pauses (keeping memory too); on a paused one it is 409.
	resp, _ := g.call("POST", "/sandboxes/"+id+"/pause", map[string]any{"memory": false}, nil)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.Equal(t, apiError{http.StatusConflict, `sandbox "` + id + `" is already paused`},
		errOf("POST", "/sandboxes/"+id+"/pause", map[string]any{"memory": false}))
	require.Equal(t, apiError{http.StatusConflict, `sandbox "` + id + `" is paused and cannot be forked; connect (resume) it first`},
		errOf("POST", "/sandboxes/"+id+"/fork", nil))
}
