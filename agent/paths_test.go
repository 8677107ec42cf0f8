package agent

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/agentapi"
)

// TestPaths_ANulByteIsABadRequest: a guest path holding a NUL byte (which
// no file system call takes) is the client's error — 400, or Connect's
// invalid_argument — on /files, the filesystem RPCs and the runtime API,
// never a 500.
func TestPaths_ANulByteIsABadRequest(t *testing.T) {
	ta := startAgent(t, nil)
	for _, m := range []string{"GET", "POST"} {
		for _, q := range []string{"a%00b", "%00", "/tmp/x%00/y"} {
			resp := ta.do(m, "/files?path="+q, "application/octet-stream", strings.NewReader("x"), nil)
			b, _ := io.ReadAll(resp.Body)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s %s: %s", m, q, b)
			require.Contains(t, string(b), "NUL")
		}
	}
	for _, method := range []string{"Stat", "MakeDir", "ListDir", "Remove"} {
		resp := ta.do("POST", "/filesystem.Filesystem/"+method, "application/json", strings.NewReader(`{"path":"a\u0000b"}`), nil)
		var e struct{ Code string }
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
		require.Equal(t, "invalid_argument", e.Code, method)
	}
	resp := ta.do("POST", "/filesystem.Filesystem/Move", "application/json", strings.NewReader(`{"source":"a","destination":"b\u0000"}`), nil)
	var e struct{ Code string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
	require.NotEqual(t, "internal", e.Code, "Move")
	for _, op := range []string{"download", "list", "exists"} {
		resp := ta.do("GET", agentapi.RuntimePrefix+"/"+op+"/a%00b", "", nil, nil)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, op)
	}
}
