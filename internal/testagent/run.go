package testagent

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// Result is one process run inside a sandbox through its agent.
type Result struct {
	Exit           int
	Stdout, Stderr string
}

func (r Result) String() string {
	return fmt.Sprintf("exit %d, stdout %q, stderr %q", r.Exit, r.Stdout, r.Stderr)
}

// Run runs `sh -c script` as user ("" names none: the agent's default;
// named the way the e2b SDK names a user, Authorization: Basic) through
// the agent at addr (process.Process/Start, Connect's JSON codec) and
// waits for it to end.
func Run(t testing.TB, addr, token, user, script string) Result {
	t.Helper()
	msg, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/sh", "args": []string{"-c", script}}})
	body := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(body[1:], uint32(len(msg)))
	body = append(body, msg...)
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/process.Process/Start", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("X-Access-Token", token)
	if user != "" {
		req.SetBasicAuth(user, "")
	}
	c := &http.Client{Timeout: 60 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("run %q: %v", script, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("run %q: HTTP %d: %s", script, resp.StatusCode, b)
	}
	res := Result{Exit: -1}
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(resp.Body, hdr[:]); err != nil {
			t.Fatalf("run %q: stream ended: %v", script, err)
		}
		payload := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
		if _, err := io.ReadFull(resp.Body, payload); err != nil {
			t.Fatal(err)
		}
		if hdr[0]&2 != 0 { // end of stream
			return res
		}
		var f struct {
			Event struct {
				Data *struct {
					Stdout []byte `json:"stdout"`
					Stderr []byte `json:"stderr"`
				} `json:"data"`
				End *struct {
					ExitCode int    `json:"exitCode"`
					Status   string `json:"status"`
				} `json:"end"`
			} `json:"event"`
		}
		if err := json.Unmarshal(payload, &f); err != nil {
			t.Fatalf("frame %s: %v", payload, err)
		}
		if d := f.Event.Data; d != nil {
			res.Stdout += string(d.Stdout)
			res.Stderr += string(d.Stderr)
		}
		if e := f.Event.End; e != nil {
			res.Exit = e.ExitCode
		}
	}
}
