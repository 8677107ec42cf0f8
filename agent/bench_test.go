package agent

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hearthvm/hearth/agentapi"
)

// BenchmarkStartTrue: one process.Process/Start stream for /bin/true,
// end to end over loopback HTTP (spawn, start/end events, end frame).
func BenchmarkStartTrue(b *testing.B) {
	a := newAgent(Options{Root: b.TempDir()})
	srv := httptest.NewServer(a)
	defer srv.Close()
	defer a.killAll()
	msg, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/true"}})
	body := appendEnvelope(nil, 0, msg)
	b.ReportAllocs()
	for b.Loop() {
		resp, err := http.Post(srv.URL+"/process.Process/Start", contentTypeConnectJSON, bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if n == 0 {
			b.Fatal("empty stream")
		}
	}
}

func BenchmarkReadEnvelope(b *testing.B) {
	payload := bytes.Repeat([]byte("x"), 4096)
	buf := appendEnvelope(nil, 0, payload)
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		if _, _, err := readEnvelope(bytes.NewReader(buf), maxMessage); err != nil {
			b.Fatal(err)
		}
	}
}

// benchRunCode posts one /execute to the interpreter port and checks the
// main result.
func benchRunCode(b *testing.B, url string, body []byte) {
	req, _ := http.NewRequest(http.MethodPost, url+"/execute", bytes.NewReader(body))
	req.Header.Set(agentapi.ForwardPortHeader, "49999")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(out, []byte(`"text":"42"`)) || !bytes.Contains(out, []byte("end_of_execution")) {
		b.Fatalf("unexpected stream %s", out)
	}
}

// BenchmarkRunCodeWarm: runCode('x = 6*7\nx') on a context whose python3
// already runs, end to end over loopback HTTP.
func BenchmarkRunCodeWarm(b *testing.B) {
	a := newAgent(Options{Root: b.TempDir(), Python: testPython(b)})
	srv := httptest.NewServer(a)
	defer srv.Close()
	defer a.killAll()
	body := []byte(`{"code":"x = 6*7\nx"}`)
	benchRunCode(b, srv.URL, body) // starts the default context
	b.ReportAllocs()
	for b.Loop() {
		benchRunCode(b, srv.URL, body)
	}
}

// BenchmarkRunCodeFirst: the first runCode on a fresh context — create it,
// start python3 with the driver, run, remove the context.
func BenchmarkRunCodeFirst(b *testing.B) {
	a := newAgent(Options{Root: b.TempDir(), Python: testPython(b)})
	srv := httptest.NewServer(a)
	defer srv.Close()
	defer a.killAll()
	call := func(method, path string, body []byte) []byte {
		req, _ := http.NewRequest(method, srv.URL+path, bytes.NewReader(body))
		req.Header.Set(agentapi.ForwardPortHeader, "49999")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return out
	}
	for b.Loop() {
		var c contextJSON
		if err := json.Unmarshal(call("POST", "/contexts", []byte(`{}`)), &c); err != nil || c.ID == "" {
			b.Fatal("no context", err)
		}
		benchRunCode(b, srv.URL, []byte(`{"code":"x = 6*7\nx","context_id":"`+c.ID+`"}`))
		call("DELETE", "/contexts/"+c.ID, nil)
	}
}
