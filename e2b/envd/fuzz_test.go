package envd

import (
	"bytes"
	"encoding/json"
	"testing"
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
			&listDirRequest{}, &moveRequest{}, &pathRequest{}, &initRequest{}}
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
