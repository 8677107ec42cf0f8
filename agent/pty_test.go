package agent

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// ptyOutput reads pty data events until want appears in the output (or
// the stream ends) and returns what was read.
func ptyOutput(t *testing.T, next func() (frame, bool), want string) (string, map[string]any) {
	t.Helper()
	var out strings.Builder
	for !strings.Contains(out.String(), want) {
		f, ok := next()
		if !ok {
			break
		}
		ev, _ := f.body["event"].(map[string]any)
		if d, ok := ev["data"].(map[string]any); ok {
			require.Nil(t, d["stdout"], "a pty process writes pty data, not stdout")
			b, err := base64.StdEncoding.DecodeString(d["pty"].(string))
			require.NoError(t, err)
			out.Write(b)
		}
		if end, ok := ev["end"].(map[string]any); ok {
			return out.String(), end
		}
	}
	return out.String(), nil
}

func TestPTY_StartInputResizeKill(t *testing.T) {
	if _, err := os.Stat("/dev/ptmx"); err != nil {
		t.Skip("no /dev/ptmx")
	}
	ta := startAgent(t, nil)
	proc := map[string]any{"cmd": "/bin/sh", "args": []string{"-i"}, "envs": map[string]string{"PS1": "$ "}}
	_, next := ta.streamCall("process.Process/Start", map[string]any{"process": proc, "pty": map[string]any{"size": map[string]any{"cols": 100, "rows": 30}}}, nil)
	f, _ := next()
	pid := f.body["event"].(map[string]any)["start"].(map[string]any)["pid"].(float64)
	sel := map[string]any{"pid": pid}

	in := func(s string) {
		require.Equal(t, 200, ta.unary("process.Process/SendInput", map[string]any{"process": sel, "input": map[string]any{"pty": base64.StdEncoding.EncodeToString([]byte(s))}}, nil))
	}
	in("stty size; test -t 0 && echo IS-A-$((1+1))TTY\n")
	out, _ := ptyOutput(t, next, "IS-A-2TTY")
	require.Contains(t, out, "30 100")

	require.Equal(t, 200, ta.unary("process.Process/Update", map[string]any{"process": sel, "pty": map[string]any{"size": map[string]any{"cols": 120, "rows": 40}}}, nil))
	in("stty size\n")
	out, _ = ptyOutput(t, next, "40 120")
	require.Contains(t, out, "40 120")

	require.Equal(t, 200, ta.unary("process.Process/SendSignal", map[string]any{"process": sel, "signal": "SIGNAL_SIGKILL"}, nil))
	_, end := ptyOutput(t, next, "\x00never")
	require.NotNil(t, end, "the stream ends after a kill")
	require.Equal(t, false, end["exited"])
}

func TestPTY_UpdateOfAPlainProcessFails(t *testing.T) {
	ta := startAgent(t, nil)
	_, next := ta.streamCall("process.Process/Start", map[string]any{"process": map[string]any{"cmd": "/bin/sleep", "args": []string{"5"}}}, nil)
	f, _ := next()
	pid := f.body["event"].(map[string]any)["start"].(map[string]any)["pid"].(float64)
	var e rpcError
	require.Equal(t, 400, ta.unary("process.Process/Update", map[string]any{"process": map[string]any{"pid": pid}, "pty": map[string]any{"size": map[string]any{"cols": 1, "rows": 1}}}, &e))
	require.Equal(t, codeFailedPrecondition, e.Code)
}

func TestWatchDir_StreamsEventsRecursively(t *testing.T) {
	ta := startAgent(t, nil)
	require.NoError(t, os.MkdirAll(filepath.Join(ta.root, "w", "sub"), 0o755))
	_, next := ta.streamCall("filesystem.Filesystem/WatchDir", map[string]any{"path": "w", "recursive": true, "includeEntry": true}, nil)
	f, _ := next()
	require.Contains(t, f.body, "start")

	require.NoError(t, os.WriteFile(filepath.Join(ta.root, "w", "sub", "a.txt"), []byte("x"), 0o644))
	seen := map[string]map[string]any{}
	deadline := time.Now().Add(5 * time.Second)
	for len(seen) < 2 && time.Now().Before(deadline) {
		f, ok := next()
		require.True(t, ok)
		ev, ok := f.body["filesystem"].(map[string]any)
		if !ok {
			continue
		}
		require.Equal(t, "sub/a.txt", ev["name"])
		seen[ev["type"].(string)] = ev
	}
	require.Contains(t, seen, eventCreate)
	require.Contains(t, seen, eventWrite)
	require.Equal(t, "a.txt", seen[eventCreate]["entry"].(map[string]any)["name"])
}

func TestWatcher_PollingRPCs(t *testing.T) {
	ta := startAgent(t, nil)
	require.NoError(t, os.MkdirAll(filepath.Join(ta.root, "p"), 0o755))
	var cr struct {
		WatcherID string `json:"watcherId"`
	}
	require.Equal(t, 200, ta.unary("filesystem.Filesystem/CreateWatcher", map[string]any{"path": "p"}, &cr))
	require.NotEmpty(t, cr.WatcherID)
	require.NoError(t, os.WriteFile(filepath.Join(ta.root, "p", "f"), nil, 0o644))
	require.NoError(t, os.Chmod(filepath.Join(ta.root, "p", "f"), 0o600))
	require.NoError(t, os.Rename(filepath.Join(ta.root, "p", "f"), filepath.Join(ta.root, "p", "g")))
	require.NoError(t, os.Remove(filepath.Join(ta.root, "p", "g")))
	types := map[string]bool{}
	deadline := time.Now().Add(5 * time.Second)
	for len(types) < 4 && time.Now().Before(deadline) {
		var got struct {
			Events []fsEvent `json:"events"`
		}
		require.Equal(t, 200, ta.unary("filesystem.Filesystem/GetWatcherEvents", map[string]any{"watcherId": cr.WatcherID}, &got))
		for _, e := range got.Events {
			types[e.Type] = true
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, want := range []string{eventCreate, eventChmod, eventRename, eventRemove} {
		require.True(t, types[want], "missing %s in %v", want, types)
	}
	require.Equal(t, 200, ta.unary("filesystem.Filesystem/RemoveWatcher", map[string]any{"watcherId": cr.WatcherID}, nil))
	require.Equal(t, 404, ta.unary("filesystem.Filesystem/GetWatcherEvents", map[string]any{"watcherId": cr.WatcherID}, nil))
}
