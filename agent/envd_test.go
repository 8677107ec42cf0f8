package agent

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/agentapi"
)

const testToken = "tok-123"

type testAgent struct {
	t    *testing.T
	url  string
	root string
	a    *agent
}

func startAgent(t *testing.T, mod func(*Options)) *testAgent {
	t.Helper()
	root := t.TempDir()
	o := Options{Token: testToken, Root: root, Env: map[string]string{"FROM_OPTIONS": "opt"}}
	if mod != nil {
		mod(&o)
	}
	a := newAgent(o)
	srv := httptest.NewServer(a)
	t.Cleanup(func() {
		a.killAll()
		srv.Close()
	})
	return &testAgent{t: t, url: srv.URL, root: root, a: a}
}

func (ta *testAgent) do(method, path, ct string, body io.Reader, hdr map[string]string) *http.Response {
	ta.t.Helper()
	req, err := http.NewRequest(method, ta.url+path, body)
	require.NoError(ta.t, err)
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	req.Header.Set("X-Access-Token", testToken)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(ta.t, err)
	ta.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// unary calls a Connect unary method and decodes the answer into out.
func (ta *testAgent) unary(method string, in any, out any) int {
	ta.t.Helper()
	b, _ := json.Marshal(in)
	resp := ta.do("POST", "/"+method, "application/json", bytes.NewReader(b), nil)
	require.Contains(ta.t, resp.Header.Get("Content-Type"), "application/json")
	if out != nil {
		require.NoError(ta.t, json.NewDecoder(resp.Body).Decode(out))
	}
	return resp.StatusCode
}

type frame struct {
	flags byte
	body  map[string]any
}

// streamCall opens a Connect server stream and returns a frame reader.
func (ta *testAgent) streamCall(method string, in any, hdr map[string]string) (*http.Response, func() (frame, bool)) {
	ta.t.Helper()
	b, _ := json.Marshal(in)
	resp := ta.do("POST", "/"+method, "application/connect+json", bytes.NewReader(appendEnvelope(nil, 0, b)), hdr)
	require.Equal(ta.t, http.StatusOK, resp.StatusCode)
	require.Equal(ta.t, "application/connect+json", resp.Header.Get("Content-Type"))
	next := func() (frame, bool) {
		flags, payload, err := readEnvelope(resp.Body, maxMessage)
		if err == io.EOF {
			return frame{}, false
		}
		require.NoError(ta.t, err)
		var m map[string]any
		require.NoError(ta.t, json.Unmarshal(payload, &m))
		return frame{flags, m}, true
	}
	return resp, next
}

type runResult struct {
	pid            float64
	stdout, stderr string
	end            map[string]any
	endStream      map[string]any
	keepalives     int
	first          string
}

func (ta *testAgent) run(cmd string, envs map[string]string, cwd string, hdr map[string]string) runResult {
	ta.t.Helper()
	proc := map[string]any{"cmd": "/bin/bash", "args": []string{"-c", cmd}}
	if envs != nil {
		proc["envs"] = envs
	}
	if cwd != "" {
		proc["cwd"] = cwd
	}
	_, next := ta.streamCall("process.Process/Start", map[string]any{"process": proc, "stdin": false}, hdr)
	var res runResult
	for {
		f, ok := next()
		if !ok {
			ta.t.Fatal("stream ended without an end-of-stream frame")
		}
		if f.flags == endStreamFlag {
			res.endStream = f.body
			_, more := next()
			require.False(ta.t, more, "frames after end-of-stream")
			return res
		}
		ev := f.body["event"].(map[string]any)
		for k := range ev {
			if res.first == "" {
				res.first = k
			}
		}
		switch {
		case ev["start"] != nil:
			res.pid = ev["start"].(map[string]any)["pid"].(float64)
		case ev["data"] != nil:
			d := ev["data"].(map[string]any)
			var raw []byte
			if s, ok := d["stdout"].(string); ok {
				require.NoError(ta.t, json.Unmarshal([]byte(`"`+s+`"`), &raw))
				res.stdout += string(raw)
			}
			if s, ok := d["stderr"].(string); ok {
				require.NoError(ta.t, json.Unmarshal([]byte(`"`+s+`"`), &raw))
				res.stderr += string(raw)
			}
		case ev["end"] != nil:
			res.end = ev["end"].(map[string]any)
		case ev["keepalive"] != nil:
			res.keepalives++
		}
	}
}

func TestAuth_EverythingButHealthNeedsTheToken(t *testing.T) {
	ta := startAgent(t, nil)
	resp, err := http.Get(ta.url + "/health")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)

	for _, path := range []string{"/files?path=x", "/process.Process/List", "/init"} {
		method := "POST"
		if strings.HasPrefix(path, "/files") {
			method = "GET"
		}
		req, _ := http.NewRequest(method, ta.url+path, strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Access-Token", "wrong")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, path)
	}
}

func TestStart_StreamsStartDataEndAndExitCode(t *testing.T) {
	ta := startAgent(t, nil)
	res := ta.run("echo hello && echo oops >&2 && exit 3", nil, "", nil)
	require.Equal(t, "start", res.first, "the first event must be start")
	require.NotZero(t, res.pid)
	require.Equal(t, "hello\n", res.stdout)
	require.Equal(t, "oops\n", res.stderr)
	require.Equal(t, float64(3), res.end["exitCode"])
	require.Equal(t, true, res.end["exited"])
	require.Equal(t, "exit status 3", res.end["status"])
	require.Equal(t, "exit status 3", res.end["error"])
	require.Empty(t, res.endStream)
}

func TestStart_EnvironmentLayersAndDefaultCwd(t *testing.T) {
	ta := startAgent(t, nil)
	resp := ta.do("POST", "/init", "application/json", strings.NewReader(`{"envVars":{"FROM_INIT":"init","OVERRIDE":"init"}}`), nil)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	res := ta.run(`echo "$FROM_OPTIONS $FROM_INIT $OVERRIDE $HOME" && pwd`, map[string]string{"OVERRIDE": "req"}, "", nil)
	require.Equal(t, "opt init req "+ta.root+"\n"+ta.root+"\n", res.stdout)
	require.Equal(t, float64(0), res.end["exitCode"])

	sub := filepath.Join(ta.root, "sub")
	require.NoError(t, os.Mkdir(sub, 0o755))
	res = ta.run("pwd", nil, "sub", nil)
	require.Equal(t, sub+"\n", res.stdout)

	res = ta.run("pwd", nil, "/does/not/exist", nil)
	require.Equal(t, "invalid_argument", res.endStream["error"].(map[string]any)["code"])
}

func TestStart_DeadlineKillsTheProcess(t *testing.T) {
	ta := startAgent(t, nil)
	marker := filepath.Join(ta.root, "survived")
	res := ta.run("sleep 2; touch "+marker, nil, "", map[string]string{"Connect-Timeout-Ms": "100"})
	require.Equal(t, "deadline_exceeded", res.endStream["error"].(map[string]any)["code"])
	// The process group is gone: List drains to empty.
	deadline := time.Now().Add(5 * time.Second)
	for {
		var out struct {
			Processes []any `json:"processes"`
		}
		require.Equal(t, 200, ta.unary("process.Process/List", map[string]any{}, &out))
		if len(out.Processes) == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "process still listed after its deadline")
		time.Sleep(10 * time.Millisecond)
	}
	_, err := os.Stat(marker)
	require.True(t, os.IsNotExist(err))
}

func TestStart_KeepalivesOnSilence(t *testing.T) {
	ta := startAgent(t, func(o *Options) { o.KeepaliveInterval = 10 * time.Millisecond })
	res := ta.run("sleep 0.3", nil, "", nil)
	require.Greater(t, res.keepalives, 0)
	require.Equal(t, float64(0), res.end["exitCode"])
}

func TestListSignalConnect(t *testing.T) {
	ta := startAgent(t, nil)
	proc := map[string]any{"cmd": "/bin/sh", "args": []string{"-c", "echo ready; sleep 30"}}
	_, next := ta.streamCall("process.Process/Start", map[string]any{"process": proc, "tag": "sleeper"}, nil)
	f, _ := next()
	pid := f.body["event"].(map[string]any)["start"].(map[string]any)["pid"].(float64)
	f, _ = next()
	require.NotNil(t, f.body["event"].(map[string]any)["data"])

	var list struct {
		Processes []struct {
			Pid    float64 `json:"pid"`
			Tag    string  `json:"tag"`
			Config struct {
				Cmd string `json:"cmd"`
			} `json:"config"`
		} `json:"processes"`
	}
	require.Equal(t, 200, ta.unary("process.Process/List", map[string]any{}, &list))
	require.Len(t, list.Processes, 1)
	require.Equal(t, pid, list.Processes[0].Pid)
	require.Equal(t, "sleeper", list.Processes[0].Tag)
	require.Equal(t, "/bin/sh", list.Processes[0].Config.Cmd)

	// A second client reattaches by tag and sees start first.
	_, next2 := ta.streamCall("process.Process/Connect", map[string]any{"process": map[string]any{"tag": "sleeper"}}, nil)
	f2, _ := next2()
	require.Equal(t, pid, f2.body["event"].(map[string]any)["start"].(map[string]any)["pid"].(float64))

	require.Equal(t, 200, ta.unary("process.Process/SendSignal", map[string]any{"process": map[string]any{"pid": pid}, "signal": "SIGNAL_SIGKILL"}, nil))
	for _, nx := range []func() (frame, bool){next, next2} {
		f, ok := nx()
		require.True(t, ok)
		end := f.body["event"].(map[string]any)["end"].(map[string]any)
		require.Equal(t, false, end["exited"])
		require.Equal(t, "signal: killed", end["status"])
		f, ok = nx()
		require.True(t, ok)
		require.Equal(t, byte(endStreamFlag), f.flags)
	}

	var e rpcError
	require.Equal(t, 404, ta.unary("process.Process/SendSignal", map[string]any{"process": map[string]any{"pid": pid}, "signal": 9}, &e))
	require.Equal(t, "not_found", e.Code)
}

func TestStdin_SendInputAndClose(t *testing.T) {
	ta := startAgent(t, nil)
	proc := map[string]any{"cmd": "/bin/cat"}
	_, next := ta.streamCall("process.Process/Start", map[string]any{"process": proc, "stdin": true}, nil)
	f, _ := next()
	pid := f.body["event"].(map[string]any)["start"].(map[string]any)["pid"].(float64)
	sel := map[string]any{"pid": pid}
	require.Equal(t, 200, ta.unary("process.Process/SendInput", map[string]any{"process": sel, "input": map[string]any{"stdin": "aGkK"}}, nil))
	f, _ = next()
	require.Equal(t, "aGkK", f.body["event"].(map[string]any)["data"].(map[string]any)["stdout"])
	require.Equal(t, 200, ta.unary("process.Process/CloseStdin", map[string]any{"process": sel}, nil))
	f, _ = next()
	require.Equal(t, float64(0), f.body["event"].(map[string]any)["end"].(map[string]any)["exitCode"])
}

func TestFiles_UploadDownloadRoundTrip(t *testing.T) {
	ta := startAgent(t, nil)
	abs := filepath.Join(ta.root, "data", "a.txt")

	// Multipart: the filename is the full destination path.
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	pw, _ := mw.CreateFormFile("file", abs)
	pw.Write([]byte("hello"))
	mw.Close()
	resp := ta.do("POST", "/files?path="+url.QueryEscape(abs), mw.FormDataContentType(), &buf, nil)
	require.Equal(t, 200, resp.StatusCode)
	var got []writeInfo
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
	require.Equal(t, []writeInfo{{Name: "a.txt", Type: "file", Path: abs}}, got)

	// Multipart without the path query (multi-file write).
	buf.Reset()
	mw = multipart.NewWriter(&buf)
	p1, p2 := filepath.Join(ta.root, "m1"), filepath.Join(ta.root, "d", "m2")
	pw, _ = mw.CreateFormFile("file", p1)
	pw.Write([]byte("one"))
	pw, _ = mw.CreateFormFile("file", p2)
	pw.Write([]byte("two"))
	mw.Close()
	resp = ta.do("POST", "/files", mw.FormDataContentType(), &buf, nil)
	require.Equal(t, 200, resp.StatusCode)
	got = nil
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
	require.Len(t, got, 2)
	require.Equal(t, p2, got[1].Path)

	// Octet-stream to a relative path lands under the home.
	resp = ta.do("POST", "/files?path=rel/b.txt", "application/octet-stream", strings.NewReader("bytes!"), nil)
	require.Equal(t, 200, resp.StatusCode)
	b, err := os.ReadFile(filepath.Join(ta.root, "rel", "b.txt"))
	require.NoError(t, err)
	require.Equal(t, "bytes!", string(b))

	// Gzip octet-stream.
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	zw.Write([]byte("zipped"))
	zw.Close()
	resp = ta.do("POST", "/files?path=z.txt", "application/octet-stream", &zb, map[string]string{"Content-Encoding": "gzip"})
	require.Equal(t, 200, resp.StatusCode)

	for path, want := range map[string]string{abs: "hello", "rel/b.txt": "bytes!", "z.txt": "zipped", p2: "two"} {
		resp = ta.do("GET", "/files?path="+url.QueryEscape(path), "", nil, nil)
		require.Equal(t, 200, resp.StatusCode)
		b, _ := io.ReadAll(resp.Body)
		require.Equal(t, want, string(b))
	}

	resp = ta.do("GET", "/files?path=missing", "", nil, nil)
	require.Equal(t, 404, resp.StatusCode)
	var re restError
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&re))
	require.Equal(t, 404, re.Code)

	resp = ta.do("POST", "/files", "application/octet-stream", strings.NewReader("x"), nil)
	require.Equal(t, 400, resp.StatusCode)
	resp = ta.do("GET", "/files?path=data", "", nil, nil)
	require.Equal(t, 400, resp.StatusCode)
}

func TestFilesystem_Service(t *testing.T) {
	ta := startAgent(t, nil)
	require.NoError(t, os.WriteFile(filepath.Join(ta.root, "f.txt"), []byte("12345"), 0o644))

	var st entryResponse
	require.Equal(t, 200, ta.unary("filesystem.Filesystem/Stat", map[string]any{"path": "f.txt"}, &st))
	require.Equal(t, "f.txt", st.Entry.Name)
	require.Equal(t, fileTypeFile, st.Entry.Type)
	require.Equal(t, filepath.Join(ta.root, "f.txt"), st.Entry.Path)
	require.Equal(t, "5", st.Entry.Size)
	require.Equal(t, uint32(0o644), st.Entry.Mode)
	require.Equal(t, "-rw-r--r--", st.Entry.Permissions)
	_, err := time.Parse(time.RFC3339Nano, st.Entry.ModifiedTime)
	require.NoError(t, err)

	var e rpcError
	require.Equal(t, 404, ta.unary("filesystem.Filesystem/Stat", map[string]any{"path": "/no/such"}, &e))
	require.Equal(t, "not_found", e.Code)

	require.Equal(t, 200, ta.unary("filesystem.Filesystem/MakeDir", map[string]any{"path": "a/b/c"}, &st))
	require.Equal(t, fileTypeDirectory, st.Entry.Type)
	require.Equal(t, 409, ta.unary("filesystem.Filesystem/MakeDir", map[string]any{"path": "a/b/c"}, &e))
	require.Equal(t, "already_exists", e.Code)

	var ls struct {
		Entries []entryInfo `json:"entries"`
	}
	require.Equal(t, 200, ta.unary("filesystem.Filesystem/ListDir", map[string]any{"path": ".", "depth": 1}, &ls))
	require.Len(t, ls.Entries, 2) // a, f.txt
	require.Equal(t, 200, ta.unary("filesystem.Filesystem/ListDir", map[string]any{"path": ta.root, "depth": "3"}, &ls))
	require.Len(t, ls.Entries, 4) // a, a/b, a/b/c, f.txt
	require.Equal(t, 400, ta.unary("filesystem.Filesystem/ListDir", map[string]any{"path": "f.txt"}, &e))

	require.Equal(t, 200, ta.unary("filesystem.Filesystem/Move", map[string]any{"source": "f.txt", "destination": "a/g.txt"}, &st))
	require.Equal(t, filepath.Join(ta.root, "a", "g.txt"), st.Entry.Path)
	require.Equal(t, 404, ta.unary("filesystem.Filesystem/Move", map[string]any{"source": "f.txt", "destination": "x"}, &e))

	require.Equal(t, 200, ta.unary("filesystem.Filesystem/Remove", map[string]any{"path": "a"}, nil))
	require.Equal(t, 200, ta.unary("filesystem.Filesystem/Remove", map[string]any{"path": "a"}, nil),
		"removing what is not there succeeds, like envd's (os.RemoveAll)")
	_, err = os.Lstat(filepath.Join(ta.root, "a"))
	require.ErrorIs(t, err, os.ErrNotExist)

	require.Equal(t, 400, ta.unary("filesystem.Filesystem/Stat", map[string]any{}, &e))
	resp := ta.do("POST", "/filesystem.Filesystem/Stat", "application/json", strings.NewReader("{not json"), nil)
	require.Equal(t, 400, resp.StatusCode)
}

func TestStream_RejectsWrongContentTypeAndCompressedFrames(t *testing.T) {
	ta := startAgent(t, nil)
	resp := ta.do("POST", "/process.Process/Start", "application/json", strings.NewReader(`{}`), nil)
	require.Equal(t, 200, resp.StatusCode)
	flags, payload, err := readEnvelope(resp.Body, maxMessage)
	require.NoError(t, err)
	require.Equal(t, byte(endStreamFlag), flags)
	require.Contains(t, string(payload), "invalid_argument")

	resp = ta.do("POST", "/process.Process/Start", "application/connect+json", bytes.NewReader(appendEnvelope(nil, compressedFlag, []byte("{}"))), nil)
	_, payload, err = readEnvelope(resp.Body, maxMessage)
	require.NoError(t, err)
	require.Contains(t, string(payload), `"error"`)
}

func TestStart_RunsAsTheDefaultUserOrTheOneTheSDKNames(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("switching users needs root")
	}
	ta := startAgent(t, func(o *Options) { o.User = "nobody" })
	res := ta.run(`id -u; echo "$HOME $USER"`, nil, "/", nil)
	require.Equal(t, "65534\n/nonexistent nobody\n", res.stdout)

	// envd semantics: the SDK names the user in Authorization: Basic; its
	// home is the default cwd.
	root := "Basic " + base64.StdEncoding.EncodeToString([]byte("root:"))
	res = ta.run(`id -u; pwd`, nil, "", map[string]string{"Authorization": root})
	require.Equal(t, "0\n/root\n", res.stdout)

	// A user the guest lacks (the SDK's default "user" on an image
	// without it) falls back to the default account.
	unknown := "Basic " + base64.StdEncoding.EncodeToString([]byte("no-such-user:"))
	res = ta.run(`id -u`, nil, "/", map[string]string{"Authorization": unknown})
	require.Equal(t, "65534\n", res.stdout)
}

// TestAgent_SandboxIdentityEnvAndRunFiles: every process sees
// E2B_SANDBOX=true; after a request naming the sandbox (SandboxIDHeader)
// it sees E2B_SANDBOX_ID too, and envd's run files hold both. A malformed
// id is ignored; a later one (a fork child addressed by its own id) wins.
func TestAgent_SandboxIdentityEnvAndRunFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run-e2b")
	ta := startAgent(t, func(o *Options) { o.E2BRunDir = dir })
	b, err := os.ReadFile(filepath.Join(dir, ".E2B_SANDBOX"))
	require.NoError(t, err)
	require.Equal(t, "true", string(b))
	env := `echo "$E2B_SANDBOX/$E2B_SANDBOX_ID"`
	require.Equal(t, "true/\n", ta.run(env, nil, "", nil).stdout)
	require.Equal(t, "true/sbabc\n", ta.run(env, nil, "", map[string]string{agentapi.SandboxIDHeader: "sbabc"}).stdout)
	require.Equal(t, "true/sbabc\n", ta.run(env, nil, "", map[string]string{agentapi.SandboxIDHeader: "../x"}).stdout, "malformed: ignored")
	require.Equal(t, "true/sbdef\n", ta.run(env, nil, "", map[string]string{agentapi.SandboxIDHeader: "sbdef"}).stdout)
	b, err = os.ReadFile(filepath.Join(dir, ".E2B_SANDBOX_ID"))
	require.NoError(t, err)
	require.Equal(t, "sbdef", string(b))
	require.Equal(t, "mine\n", ta.run(`echo "$E2B_SANDBOX_ID"`, map[string]string{"E2B_SANDBOX_ID": "mine"}, "", nil).stdout, "a request's env wins")
}
