package envd

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
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
