package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/agentapi"
)

// testPython is the host's python3 (the real binary, not a shim: tests and
// benchmarks time its start); tests that need it skip without one.
func testPython(tb testing.TB) string {
	tb.Helper()
	for _, p := range []string{"/usr/bin/python3"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, err := exec.LookPath("python3")
	if err != nil {
		tb.Skip("no python3 on this host")
	}
	return p
}

func startInterpreterAgent(t *testing.T, mod func(*Options)) *testAgent {
	py := testPython(t)
	return startAgent(t, func(o *Options) {
		o.Python = py
		if mod != nil {
			mod(o)
		}
	})
}

// icall sends a request to the interpreter port through the agent's
// forward, with the token.
func (ta *testAgent) icall(ctx context.Context, method, path string, body any) *http.Response {
	ta.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	default:
		js, err := json.Marshal(b)
		require.NoError(ta.t, err)
		rd = bytes.NewReader(js)
	}
	req, err := http.NewRequestWithContext(ctx, method, ta.url+path, rd)
	require.NoError(ta.t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Access-Token", testToken)
	req.Header.Set(agentapi.ForwardPortHeader, strconv.Itoa(agentapi.InterpreterPort))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(ta.t, err)
	ta.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// execution is a decoded /execute stream.
type execution struct {
	msgs    []map[string]any
	stdout  string
	stderr  string
	results []map[string]any
	err     map[string]any
	count   int
	ended   bool
}

func (e execution) text() string {
	for _, r := range e.results {
		if r["is_main_result"] == true {
			s, _ := r["text"].(string)
			return s
		}
	}
	return ""
}

func decodeExecution(t *testing.T, r io.Reader) execution {
	t.Helper()
	var e execution
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 32<<20)
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), "line %q", sc.Text())
		require.False(t, e.ended, "message after end_of_execution: %v", m)
		e.msgs = append(e.msgs, m)
		switch m["type"] {
		case "stdout":
			e.stdout += m["text"].(string)
		case "stderr":
			e.stderr += m["text"].(string)
		case "result":
			e.results = append(e.results, m)
		case "error":
			e.err = m
		case "number_of_executions":
			e.count = int(m["execution_count"].(float64))
		case "end_of_execution":
			e.ended = true
		default:
			t.Fatalf("unknown message %v", m)
		}
	}
	require.NoError(t, sc.Err())
	return e
}

func (ta *testAgent) runCode(code string, extra map[string]any) execution {
	ta.t.Helper()
	body := map[string]any{"code": code}
	for k, v := range extra {
		body[k] = v
	}
	resp := ta.icall(context.Background(), "POST", "/execute", body)
	require.Equal(ta.t, 200, resp.StatusCode)
	e := decodeExecution(ta.t, resp.Body)
	require.True(ta.t, e.ended, "no end_of_execution in %v", e.msgs)
	return e
}

func (ta *testAgent) createContext(body any) contextJSON {
	ta.t.Helper()
	resp := ta.icall(context.Background(), "POST", "/contexts", body)
	require.Equal(ta.t, 200, resp.StatusCode)
	var c contextJSON
	require.NoError(ta.t, json.NewDecoder(resp.Body).Decode(&c))
	return c
}

func TestInterpreter_LastExpressionStateAndCount(t *testing.T) {
	ta := startInterpreterAgent(t, nil)
	e := ta.runCode("x = 6*7\nx", nil)
	require.Equal(t, "42", e.text())
	require.Nil(t, e.err)
	require.Equal(t, 1, e.count)
	require.Equal(t, "number_of_executions", e.msgs[0]["type"])

	e = ta.runCode("x + 1", nil)
	require.Equal(t, "43", e.text())
	require.Equal(t, 2, e.count)

	// No result for a statement, None, or a trailing semicolon.
	for _, code := range []string{"y = 1", "None", "x;", "print"} {
		e = ta.runCode(code, nil)
		if code == "print" {
			require.Equal(t, "<built-in function print>", e.text())
			continue
		}
		require.Empty(t, e.results, code)
	}
	// _ is the last result, __name__ is __main__, strings are repr()s.
	require.Equal(t, "<built-in function print>", ta.runCode("_", nil).text())
	require.Equal(t, "'__main__'", ta.runCode("__name__", nil).text())
	require.Equal(t, `'a\nb'`, ta.runCode(`"a\nb"`, nil).text())
	// A function defined in one call is there in the next.
	ta.runCode("def f(n):\n    return n * 2", nil)
	require.Equal(t, "[2, 4]", ta.runCode("[f(1), f(2)]", nil).text())
}

func TestInterpreter_StdoutStderrStreamLive(t *testing.T) {
	ta := startInterpreterAgent(t, nil)
	e := ta.runCode("import sys\nprint('hello')\nprint('oops', file=sys.stderr)\n7", nil)
	require.Equal(t, "hello\n", e.stdout)
	require.Equal(t, "oops\n", e.stderr)
	require.Equal(t, "7", e.text())
	// One message per printed line, not per write.
	var outs []string
	for _, m := range e.msgs {
		if m["type"] == "stdout" {
			outs = append(outs, m["text"].(string))
			require.NotEmpty(t, m["timestamp"])
		}
	}
	require.Equal(t, []string{"hello\n"}, outs)

	// Output below Python (a subprocess, os.write) is captured too, before
	// the end of its execution.
	e = ta.runCode("import os, subprocess\nos.system('echo from-shell')\nsubprocess.run(['sh','-c','echo to-err >&2'])\nos.write(1, 'ünï\\n'.encode())\nNone", nil)
	require.Equal(t, "from-shell\nünï\n", e.stdout)
	require.Equal(t, "to-err\n", e.stderr)

	// Streamed: the first line arrives while the code still runs.
	resp := ta.icall(context.Background(), "POST", "/execute", map[string]any{"code": "import time\nprint('first')\ntime.sleep(1)\nprint('second')"})
	require.Equal(t, 200, resp.StatusCode)
	start := time.Now()
	br := bufio.NewReader(resp.Body)
	var firstAt time.Duration
	for {
		line, err := br.ReadBytes('\n')
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(line, &m))
		if m["type"] == "stdout" {
			require.Equal(t, "first\n", m["text"])
			firstAt = time.Since(start)
			break
		}
	}
	rest, _ := io.ReadAll(br)
	endAt := time.Since(start)
	require.Contains(t, string(rest), `"second\n"`)
	// The code sleeps 1 s between its lines: the first came well before
	// the end, however late this goroutine ran.
	require.Greater(t, endAt-firstAt, 500*time.Millisecond, "the first line waited for the end")
}

func TestInterpreter_ErrorsNameValueTraceback(t *testing.T) {
	ta := startInterpreterAgent(t, nil)
	e := ta.runCode("a = 1\n1/0", nil)
	require.NotNil(t, e.err)
	require.Equal(t, "ZeroDivisionError", e.err["name"])
	require.Equal(t, "division by zero", e.err["value"])
	tb := e.err["traceback"].(string)
	require.Contains(t, tb, "Traceback (most recent call last)")
	require.Contains(t, tb, "1/0")
	require.Contains(t, tb, "ZeroDivisionError: division by zero")
	require.NotContains(t, tb, "hearth-interpreter", "the driver's frames are not the user's")
	require.Empty(t, e.results)

	// Statements before the error ran; the context is fine after it.
	require.Equal(t, "1", ta.runCode("a", nil).text())

	e = ta.runCode("def f(:\n  pass", nil)
	require.Equal(t, "SyntaxError", e.err["name"])
	require.NotContains(t, e.err["traceback"], "ast.py")

	e = ta.runCode("import no_such_module_here", nil)
	require.Equal(t, "ModuleNotFoundError", e.err["name"])

	e = ta.runCode("raise SystemExit(3)", nil)
	require.Equal(t, "SystemExit", e.err["name"])
	require.Equal(t, "2", ta.runCode("1+1", nil).text(), "SystemExit does not end the context")

	// A repr that raises is an error, not a dead context.
	e = ta.runCode("class B:\n    def __repr__(self): raise ValueError('no repr')\nB()", nil)
	require.Equal(t, "ValueError", e.err["name"])
}

func TestInterpreter_EnvVarsPerCall(t *testing.T) {
	ta := startInterpreterAgent(t, func(o *Options) { o.Env = map[string]string{"GLOBAL_ONE": "g"} })
	e := ta.runCode("import os\n(os.environ.get('FOO'), os.environ.get('GLOBAL_ONE'))", map[string]any{"env_vars": map[string]string{"FOO": "bar", "GLOBAL_ONE": "over"}})
	require.Equal(t, "('bar', 'over')", e.text())
	e = ta.runCode("(os.environ.get('FOO'), os.environ.get('GLOBAL_ONE'))", nil)
	require.Equal(t, "(None, 'g')", e.text(), "a call's env_vars end with the call")
	e = ta.runCode("import subprocess\nsubprocess.run(['sh','-c','echo $FOO'], capture_output=True, text=True).stdout", map[string]any{"env_vars": map[string]string{"FOO": "child"}})
	require.Equal(t, `'child\n'`, e.text())
}

func TestInterpreter_InterruptOnCancelKeepsContext(t *testing.T) {
	ta := startInterpreterAgent(t, nil)
	ta.runCode("kept = 'yes'", nil)
	ctx, cancel := context.WithCancel(context.Background())
	resp := ta.icall(ctx, "POST", "/execute", map[string]any{"code": "import time\nprint('looping', flush=True)\nwhile True:\n    time.sleep(0.01)"})
	require.Equal(t, 200, resp.StatusCode)
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		if strings.Contains(line, "looping") {
			break
		}
	}
	cancel()
	start := time.Now()
	e := ta.runCode("kept", nil)
	require.Equal(t, "'yes'", e.text(), "the interrupt kept the context's state")
	require.Less(t, time.Since(start), 3*time.Second)

	// Code that ignores the interrupt (its own SIGINT handler: a try/except
	// around the loop body would leave the loop header exposed) is killed
	// after the grace period;
	// the context then starts over.
	if testing.Short() {
		return
	}
	ctx, cancel = context.WithCancel(context.Background())
	resp = ta.icall(ctx, "POST", "/execute", map[string]any{"code": "import signal, time\nsignal.signal(signal.SIGINT, lambda *a: None)\nprint('stubborn', flush=True)\nwhile True:\n    time.sleep(0.01)"})
	br = bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		if strings.Contains(line, "stubborn") {
			break
		}
	}
	cancel()
	e = ta.runCode("'kept' in globals()", nil)
	require.Equal(t, "False", e.text(), "a killed context restarts empty")
}

func TestInterpreter_ProcessDeathIsReported(t *testing.T) {
	ta := startInterpreterAgent(t, nil)
	ta.runCode("z = 1", nil)
	e := ta.runCode("import os\nprint('bye', flush=True)\nos._exit(3)", nil)
	require.Equal(t, "UnexpectedEndOfExecution", e.err["name"])
	require.Contains(t, e.stdout, "bye")
	e = ta.runCode("'z' in globals()", nil)
	require.Equal(t, "False", e.text())
}

func TestInterpreter_Contexts(t *testing.T) {
	ta := startInterpreterAgent(t, nil)
	ta.runCode("shared = 1", nil)
	dir := t.TempDir()
	c := ta.createContext(map[string]any{"language": "python", "cwd": dir})
	require.Equal(t, "python", c.Language)
	require.Equal(t, dir, c.Cwd)
	require.Len(t, c.ID, 36)

	// Its own state and working directory.
	e := ta.runCode("shared", map[string]any{"context_id": c.ID})
	require.Equal(t, "NameError", e.err["name"])
	require.Equal(t, fmt.Sprintf("%q", dir), strings.ReplaceAll(ta.runCode("import os\nos.getcwd()", map[string]any{"context_id": c.ID}).text(), "'", `"`))
	ta.runCode("mine = 2", map[string]any{"context_id": c.ID})
	require.Equal(t, "2", ta.runCode("mine", map[string]any{"context_id": c.ID}).text())
	// language python is the default context.
	require.Equal(t, "1", ta.runCode("shared", map[string]any{"language": "python"}).text())

	resp := ta.icall(context.Background(), "GET", "/contexts", nil)
	require.Equal(t, 200, resp.StatusCode)
	var list []contextJSON
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
	require.Len(t, list, 2)
	ids := []string{list[0].ID, list[1].ID}
	require.Contains(t, ids, c.ID)

	// Restart: same id, fresh state.
	resp = ta.icall(context.Background(), "POST", "/contexts/"+c.ID+"/restart", nil)
	require.Equal(t, 204, resp.StatusCode)
	require.Equal(t, "NameError", ta.runCode("mine", map[string]any{"context_id": c.ID}).err["name"])
	require.Equal(t, "1", ta.runCode("shared", nil).text(), "restarting one context leaves the others")

	// Remove: gone, and its id answers 404.
	resp = ta.icall(context.Background(), "DELETE", "/contexts/"+c.ID, nil)
	require.Equal(t, 204, resp.StatusCode)
	resp = ta.icall(context.Background(), "POST", "/execute", map[string]any{"code": "1", "context_id": c.ID})
	require.Equal(t, 404, resp.StatusCode)
	resp = ta.icall(context.Background(), "DELETE", "/contexts/"+c.ID, nil)
	require.Equal(t, 404, resp.StatusCode)
	resp = ta.icall(context.Background(), "POST", "/contexts/"+c.ID+"/restart", nil)
	require.Equal(t, 404, resp.StatusCode)

	// The default context may go too; the next default execution makes a new one.
	resp = ta.icall(context.Background(), "DELETE", "/contexts/default", nil)
	require.Equal(t, 204, resp.StatusCode)
	require.Equal(t, "NameError", ta.runCode("shared", nil).err["name"])
}

func TestInterpreter_ContextLimit(t *testing.T) {
	ta := startInterpreterAgent(t, func(o *Options) { o.MaxCodeContexts = 2 })
	ta.createContext(nil)
	ta.createContext(map[string]any{})
	resp := ta.icall(context.Background(), "POST", "/contexts", map[string]any{})
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
}

func TestInterpreter_RejectsBadRequests(t *testing.T) {
	ta := startInterpreterAgent(t, nil)
	for _, tc := range []struct {
		method, path string
		body         any
		want         int
	}{
		{"POST", "/execute", "{", 400},
		{"POST", "/execute", `{"code": 1}`, 400},
		{"POST", "/execute", `{"code": "1"} {}`, 400},
		{"POST", "/execute", map[string]any{"code": "1", "language": "javascript"}, 400},
		{"POST", "/execute", map[string]any{"code": "1", "language": "python", "context_id": "x"}, 400},
		{"POST", "/execute", map[string]any{"code": "1", "env_vars": map[string]string{"A=B": "c"}}, 400},
		{"POST", "/execute", map[string]any{"code": "1", "context_id": "nope"}, 404},
		{"POST", "/contexts", map[string]any{"language": "r"}, 400},
		{"POST", "/contexts", map[string]any{"cwd": "/no/such/dir"}, 400},
		{"GET", "/execute", nil, 404},
		{"PUT", "/contexts", nil, 404},
		{"GET", "/nope", nil, 404},
	} {
		resp := ta.icall(context.Background(), tc.method, tc.path, tc.body)
		require.Equal(t, tc.want, resp.StatusCode, "%s %s %v", tc.method, tc.path, tc.body)
		require.Contains(t, resp.Header.Get("Content-Type"), "application/json")
	}
	resp := ta.icall(context.Background(), "GET", "/health", nil)
	require.Equal(t, 200, resp.StatusCode)

	// 413 over the body limit.
	big := `{"code": "` + strings.Repeat("x", maxCodeBody) + `"}`
	resp = ta.icall(context.Background(), "POST", "/execute", big)
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
}

func TestInterpreter_NeedsToken(t *testing.T) {
	ta := startInterpreterAgent(t, nil)
	for _, tok := range []string{"", "wrong"} {
		req, _ := http.NewRequest("POST", ta.url+"/execute", strings.NewReader(`{"code":"1"}`))
		req.Header.Set(agentapi.ForwardPortHeader, "49999")
		if tok != "" {
			req.Header.Set("X-Access-Token", tok)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	}
	// Without the forward header the agent's own /execute does not exist.
	resp := ta.do("POST", "/execute", "application/json", strings.NewReader(`{"code":"1"}`), nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}

func TestInterpreter_NoInterpreterForwardsToGuestPort(t *testing.T) {
	ta := startInterpreterAgent(t, func(o *Options) { o.NoInterpreter = true })
	resp := ta.icall(context.Background(), "POST", "/execute", map[string]any{"code": "1"})
	require.Equal(t, http.StatusBadGateway, resp.StatusCode, "nothing listens on the loopback's 49999 here")
}

func TestInterpreter_RichResultsAndDisplay(t *testing.T) {
	ta := startInterpreterAgent(t, nil)
	code := `class H:
    def __repr__(self): return 'H()'
    def _repr_html_(self): return '<b>h</b>'
    def _repr_markdown_(self): return '**h**'
    def _repr_json_(self): return {'h': 1}
    def _repr_png_(self): return b'\x89PNG'
display(1, 'two')
H()`
	e := ta.runCode(code, nil)
	require.Len(t, e.results, 3)
	require.Equal(t, false, e.results[0]["is_main_result"])
	require.Equal(t, "1", e.results[0]["text"])
	require.Equal(t, "'two'", e.results[1]["text"])
	main := e.results[2]
	require.Equal(t, true, main["is_main_result"])
	require.Equal(t, "H()", main["text"])
	require.Equal(t, "<b>h</b>", main["html"])
	require.Equal(t, "**h**", main["markdown"])
	require.Equal(t, map[string]any{"h": float64(1)}, main["json"])
	require.Equal(t, "iVBORw==", main["png"])
	// A class is not its instances: no formats for H itself.
	e = ta.runCode("H", nil)
	require.NotContains(t, e.results[0], "html")
}

// TestInterpreter_MatplotlibFiguresArePNGResults: with the default backend
// (module://hearth_inline), plt.show() sends the open figures as PNG
// results at that point of the output, the end of an execution sends the
// rest, and both close them; nothing warns on stderr. Needs matplotlib in
// the host's python3 (hack/setup.d/10-packages.sh installs it).
func TestInterpreter_MatplotlibFiguresArePNGResults(t *testing.T) {
	if err := exec.Command(testPython(t), "-c", "import matplotlib").Run(); err != nil {
		t.Skip("the host's python3 has no matplotlib (hack/setup.d/10-packages.sh installs python3-matplotlib)")
	}
	ta := startInterpreterAgent(t, nil)
	e := ta.runCode(`import matplotlib.pyplot as plt
plt.plot([1, 2, 3])
plt.show()
print("after show")
fig = plt.figure(figsize=(2, 1))
fig.gca().bar([1], [2]);`, nil)
	require.Nil(t, e.err)
	require.Empty(t, e.stderr)
	require.Len(t, e.results, 2, "%v", e.msgs)
	var order []string
	for _, m := range e.msgs {
		switch m["type"] {
		case "result", "stdout":
			order = append(order, m["type"].(string))
		}
	}
	require.Equal(t, []string{"result", "stdout", "result"}, order, "show() sends its figure before the later output")
	for i, want := range []string{"<Figure size 640x480 with 1 Axes>", "<Figure size 200x100 with 1 Axes>"} {
		r := e.results[i]
		require.Equal(t, false, r["is_main_result"])
		require.Equal(t, want, r["text"])
		png, err := base64.StdEncoding.DecodeString(r["png"].(string))
		require.NoError(t, err)
		require.True(t, bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")), "result %d is not a PNG", i)
	}
	e = ta.runCode("len(plt.get_fignums())", nil)
	require.Equal(t, "0", e.text(), "figures are closed once sent")
}

func TestInterpreter_ConcurrentCallsOnOneContextQueue(t *testing.T) {
	ta := startInterpreterAgent(t, nil)
	ta.runCode("import time\nseq = []", nil)
	done := make(chan execution, 2)
	for i := range 2 {
		go func() {
			resp := ta.icall(context.Background(), "POST", "/execute", map[string]any{"code": fmt.Sprintf("seq.append(%d)\ntime.sleep(0.2)\nseq.append(%d)", i, i)})
			done <- decodeExecution(t, resp.Body)
		}()
	}
	<-done
	<-done
	got := ta.runCode("seq", nil).text()
	require.Contains(t, []string{"[0, 0, 1, 1]", "[1, 1, 0, 0]"}, got, "executions interleaved")
}

func TestInterpreter_ShutdownKillsContexts(t *testing.T) {
	ta := startInterpreterAgent(t, nil)
	e := ta.runCode("import os\nos.getpid()", nil)
	pid, err := strconv.Atoi(e.text())
	require.NoError(t, err)
	ta.a.killAll()
	require.Eventually(t, func() bool { return exec.Command("kill", "-0", strconv.Itoa(pid)).Run() != nil }, 5*time.Second, 20*time.Millisecond)
	resp := ta.icall(context.Background(), "POST", "/contexts", nil)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
}

// Pure parts.

func TestInterpreter_EncodeMessages(t *testing.T) {
	at := time.Date(2024, 5, 6, 7, 8, 9, 10, time.UTC)
	for _, tc := range []struct {
		got  []byte
		want string
	}{
		{encodeStream("stdout", []byte("hi\n"), at), `{"type":"stdout","text":"hi\n","timestamp":"2024-05-06T07:08:09.00000001Z"}`},
		{encodeStream("stderr", []byte{0xff, 'x'}, at), `{"type":"stderr","text":"\ufffdx","timestamp":"2024-05-06T07:08:09.00000001Z"}`},
		{encodeError("ZeroDivisionError", "division by zero", "Traceback...\n"), `{"type":"error","name":"ZeroDivisionError","value":"division by zero","traceback":"Traceback...\n"}`},
		{encodeCount(3), `{"type":"number_of_executions","execution_count":3}`},
		{encodeEnd(), `{"type":"end_of_execution"}`},
	} {
		require.Equal(t, tc.want+"\n", string(tc.got))
	}
	for _, tc := range []struct {
		raw, want string
		ok        bool
	}{
		{`{"type":"result","text":"42","is_main_result":true}`, `{"is_main_result":true,"text":"42","type":"result"}`, true},
		{`{"type":"result","text":"x","html":"<b>","json":{"a":1},"bogus":1,"png":null}`, `{"html":"<b>","is_main_result":false,"json":{"a":1},"text":"x","type":"result"}`, true},
		{`{"type":"result","is_main_result":"yes"}`, ``, false},
		{`[1]`, ``, false},
	} {
		got, ok := encodeResult([]byte(tc.raw))
		require.Equal(t, tc.ok, ok, tc.raw)
		if ok {
			require.Equal(t, tc.want+"\n", string(got))
		}
	}
}

func TestInterpreter_MarkerScanner(t *testing.T) {
	m := []byte("\x00M\x00")
	for _, tc := range []struct {
		name   string
		chunks []string
		want   []string // "|" is the marker
	}{
		{"plain", []string{"abc"}, []string{"abc"}},
		{"marker alone", []string{"\x00M\x00"}, []string{"|"}},
		{"around", []string{"a\x00M\x00b"}, []string{"a", "|", "b"}},
		{"split marker", []string{"a\x00", "M", "\x00b"}, []string{"a", "|", "b"}},
		{"false start", []string{"a\x00", "x"}, []string{"a", "\x00x"}},
		{"two", []string{"\x00M\x00\x00M\x00"}, []string{"|", "|"}},
		{"split utf8", []string{"\xc3", "\xbc!"}, []string{"ü!"}},
		{"split 4-byte utf8", []string{"a\xf0\x9f", "\x98\x80"}, []string{"a", "😀"}},
		{"invalid byte passes", []string{"\xff"}, []string{"\xff"}},
	} {
		s := markerScanner{marker: m}
		var got []string
		for _, c := range tc.chunks {
			for _, p := range s.feed([]byte(c)) {
				if p.marker {
					got = append(got, "|")
				} else {
					got = append(got, string(p.data))
				}
			}
		}
		if r := s.rest(); len(r) > 0 {
			got = append(got, string(r))
		}
		require.Equal(t, tc.want, got, tc.name)
	}
}

func TestInterpreter_DecodeRequests(t *testing.T) {
	for _, tc := range []struct {
		body string
		ok   bool
	}{
		{``, true},
		{`{}`, true},
		{`{"code":"x = 1\nx","context_id":null,"language":"python","env_vars":{"A":"b"}}`, true},
		{`{"code":"1","future_field":true}`, true},
		{`{"code":"1","language":"Python3"}`, true},
		{`{"code":"1","language":"bash"}`, false},
		{`{"code":"1","language":"python","context_id":"c"}`, false},
		{`{"code":"1","env_vars":{"":"x"}}`, false},
		{`{"code":"1","env_vars":{"A":"x\u0000"}}`, false},
		{`{"code":["1"]}`, false},
		{`null`, true},
		{`{"code":"1"}x`, false},
	} {
		_, err := decodeRunCode([]byte(tc.body))
		require.Equal(t, tc.ok, err == nil, "%s: %v", tc.body, err)
	}
	c, err := decodeCreateContext([]byte(`{"language":"PYTHON","cwd":"/tmp"}`))
	require.NoError(t, err)
	require.Equal(t, "python", c.Language)
	_, err = decodeCreateContext([]byte(`{"language":"java"}`))
	require.ErrorContains(t, err, "python only")
}

func TestInterpreter_ReadLineDropsOverlongLines(t *testing.T) {
	br := bufio.NewReaderSize(strings.NewReader(strings.Repeat("x", 100)+"\nshort\nlast"), 16)
	l, err := readLine(br, 50)
	require.NoError(t, err)
	require.Empty(t, l)
	l, err = readLine(br, 50)
	require.NoError(t, err)
	require.Equal(t, "short", string(l))
	l, err = readLine(br, 50)
	require.Equal(t, io.EOF, err)
	require.Equal(t, "last", string(l))
}
