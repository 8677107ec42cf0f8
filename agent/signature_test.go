package agent

import (
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/agentapi"
)

// The signature itself (agentapi.VerifyFileSignature) is tested in
// agentapi; these are the agent's use of it.

func TestSignedURL_WorksWithoutTokenAndExpires(t *testing.T) {
	ta := startAgent(t, nil)
	require.NoError(t, os.WriteFile(filepath.Join(ta.root, "s.txt"), []byte("signed"), 0o644))
	get := func(q url.Values) *http.Response {
		resp, err := http.Get(ta.url + "/files?" + q.Encode())
		require.NoError(t, err)
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	q := url.Values{"path": {"s.txt"}, "signature": {agentapi.FileSignature("s.txt", "read", "", testToken, 0)}}
	resp := get(q)
	require.Equal(t, 200, resp.StatusCode)
	b, _ := io.ReadAll(resp.Body)
	require.Equal(t, "signed", string(b))

	// Signed for writing, not reading; unsigned; expired.
	q.Set("signature", agentapi.FileSignature("s.txt", "write", "", testToken, 0))
	require.Equal(t, 401, get(q).StatusCode)
	require.Equal(t, 401, get(url.Values{"path": {"s.txt"}}).StatusCode)
	exp := time.Now().Add(-time.Minute).Unix()
	q = url.Values{"path": {"s.txt"}, "signature": {agentapi.FileSignature("s.txt", "read", "", testToken, exp)}, "signature_expiration": {strconv.FormatInt(exp, 10)}}
	require.Equal(t, 401, get(q).StatusCode)
	exp = time.Now().Add(time.Minute).Unix()
	q = url.Values{"path": {"s.txt"}, "signature": {agentapi.FileSignature("s.txt", "read", "", testToken, exp)}, "signature_expiration": {strconv.FormatInt(exp, 10)}}
	require.Equal(t, 200, get(q).StatusCode)

	// Upload.
	q = url.Values{"path": {"up.txt"}, "signature": {agentapi.FileSignature("up.txt", "write", "", testToken, 0)}}
	resp, err := http.Post(ta.url+"/files?"+q.Encode(), "application/octet-stream", strings.NewReader("up"))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	b, _ = os.ReadFile(filepath.Join(ta.root, "up.txt"))
	require.Equal(t, "up", string(b))
}

// TestSignedURL_TheUserIsTheSignedOne: a signed URL acts as the user its
// signature names (?username=, else the default user), never as one the
// holder adds in Authorization: Basic — so a URL signed for "notes.txt"
// cannot be turned into root's /root/notes.txt.
func TestSignedURL_TheUserIsTheSignedOne(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("switching users needs root")
	}
	home, err := lookupAccount("root")
	if err != nil || home.home == "" {
		t.Skip("no root account with a home")
	}
	if fi, err := os.Stat(home.home); err != nil || !fi.IsDir() {
		t.Skip("root's home does not exist")
	}
	ta := startAgent(t, nil)
	name := "hearth-signed-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ".txt"
	t.Cleanup(func() { os.Remove(filepath.Join(home.home, name)) })
	require.NoError(t, os.WriteFile(filepath.Join(ta.root, name), []byte("default user's"), 0o644))
	do := func(method, op string, body io.Reader) *http.Response {
		q := url.Values{"path": {name}, "signature": {agentapi.FileSignature(name, op, "", testToken, 0)}}
		req, err := http.NewRequest(method, ta.url+"/files?"+q.Encode(), body)
		require.NoError(t, err)
		req.SetBasicAuth("root", "")
		if body != nil {
			req.Header.Set("Content-Type", "application/octet-stream")
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	resp := do("GET", "read", nil)
	b, _ := io.ReadAll(resp.Body)
	require.Equal(t, 200, resp.StatusCode, string(b))
	require.Equal(t, "default user's", string(b))
	resp = do("POST", "write", strings.NewReader("written"))
	require.Equal(t, 200, resp.StatusCode)
	b, _ = os.ReadFile(filepath.Join(ta.root, name))
	require.Equal(t, "written", string(b), "the upload lands where the signature's user resolves it")
	_, err = os.Lstat(filepath.Join(home.home, name))
	require.True(t, os.IsNotExist(err), "a signed upload was turned into root's %s", filepath.Join(home.home, name))
}
