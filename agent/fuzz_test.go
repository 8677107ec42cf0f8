package agent

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/hearthvm/hearth/agentapi"
)

// FuzzReadEnvelope: the decoder never panics, never returns more than the
// limit, and round-trips what appendEnvelope wrote.
func FuzzReadEnvelope(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 2, '{', '}'})
	f.Add([]byte{2, 0, 0, 0, 0})
	f.Add([]byte{1, 0, 0, 0, 0})
	f.Add([]byte{0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		flags, payload, err := readEnvelope(bytes.NewReader(b), 1024)
		if err != nil {
			return
		}
		if len(payload) > 1024 || flags&compressedFlag != 0 {
			t.Fatalf("accepted flags %x with %d bytes", flags, len(payload))
		}
		again := appendEnvelope(nil, flags, payload)
		if !bytes.Equal(again, b[:len(again)]) {
			t.Fatalf("round trip mismatch")
		}
	})
}

// FuzzDecodeRequests: every request decoder rejects or accepts without
// panicking, and what it accepts re-encodes.
func FuzzDecodeRequests(f *testing.F) {
	f.Add([]byte(`{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"],"envs":{"A":"b"},"cwd":"/tmp"},"stdin":false}`))
	f.Add([]byte(`{"process":{"pid":"12"},"signal":"SIGNAL_SIGKILL"}`))
	f.Add([]byte(`{"process":{"tag":"x"},"input":{"stdin":"aGkK"}}`))
	f.Add([]byte(`{"path":"/a","depth":"3"}`))
	f.Add([]byte(`{"source":"a","destination":"b"}`))
	f.Add([]byte(`{"envVars":{"K":"V"}}`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, b []byte) {
		targets := []any{&startRequest{}, &connectRequest{}, &sendSignalRequest{}, &sendInputRequest{},
			&listDirRequest{}, &moveRequest{}, &pathRequest{}, &agentapi.InitRequest{}}
		for _, v := range targets {
			if err := decodeJSON(b, v); err != nil {
				if asRPCError(err).Code != codeInvalidArgument {
					t.Fatalf("decode error has code %q", asRPCError(err).Code)
				}
				continue
			}
			if _, err := json.Marshal(v); err != nil {
				t.Fatalf("accepted request does not re-encode: %v", err)
			}
		}
	})
}

func TestIsStream_ProcessStreamsAndFilesOnly(t *testing.T) {
	for path, want := range map[string]bool{
		"/process.Process/Start": true, "/process.Process/Connect": true, "/files": true,
		"/process.Process/SendInput": false, "/filesystem.Filesystem/Stat": false, "/health": false, "/init": false,
	} {
		r, _ := http.NewRequest(http.MethodPost, "http://agent"+path, nil)
		if got := isStream(r); got != want {
			t.Errorf("isStream(%s) = %v, want %v", path, got, want)
		}
	}
}

// FuzzDecodeInterpreterRequests: the code interpreter's request decoders
// never panic, and what they accept is valid (one of context and language,
// a served language, clean env vars) and re-encodes.
func FuzzDecodeInterpreterRequests(f *testing.F) {
	f.Add([]byte(`{"code":"x = 6*7\nx"}`))
	f.Add([]byte(`{"code":"1","context_id":"c","env_vars":{"A":"b"}}`))
	f.Add([]byte(`{"code":"1","language":"python","context_id":"c"}`))
	f.Add([]byte(`{"language":"python","cwd":"/home/user"}`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, b []byte) {
		if req, err := decodeRunCode(b); err == nil {
			if req.ContextID != "" && req.Language != "" {
				t.Fatalf("accepted both context_id and language")
			}
			if req.Language != "" {
				if _, err := normalizeLanguage(req.Language); err != nil {
					t.Fatalf("accepted language %q", req.Language)
				}
			}
			for k, v := range req.EnvVars {
				if k == "" || bytes.ContainsAny([]byte(k), "=\x00") || bytes.ContainsRune([]byte(v), 0) {
					t.Fatalf("accepted env var %q=%q", k, v)
				}
			}
			if encodeLine(map[string]any{"code": req.Code, "env": req.EnvVars}) == nil {
				t.Fatalf("accepted request does not re-encode")
			}
		}
		if req, err := decodeCreateContext(b); err == nil && req.Language != "python" {
			t.Fatalf("accepted context language %q", req.Language)
		}
	})
}

// FuzzMarkerScanner: however a stream is cut into chunks, the scanner
// finds the same markers and passes the same bytes in between.
func FuzzMarkerScanner(f *testing.F) {
	f.Add([]byte("a\x00M\x00b"), uint8(2))
	f.Add([]byte("\xc3\xbc\x00M"), uint8(1))
	f.Fuzz(func(t *testing.T, b []byte, cut uint8) {
		m := []byte("\x00M\x00")
		whole := func(chunk int) string {
			s := markerScanner{marker: m}
			var out []byte
			for i := 0; i < len(b); i += chunk {
				for _, p := range s.feed(b[i:min(i+chunk, len(b))]) {
					if p.marker {
						out = append(out, '|', '|')
					} else {
						out = append(out, p.data...)
					}
				}
			}
			return string(append(out, s.rest()...))
		}
		want := string(bytes.ReplaceAll(b, m, []byte("||")))
		if got := whole(len(b) + 1); got != want {
			t.Fatalf("one chunk: %q, want %q", got, want)
		}
		if got := whole(int(cut%8) + 1); got != want {
			t.Fatalf("chunks of %d: %q, want %q", cut%8+1, got, want)
		}
	})
}
