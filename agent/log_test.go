package agent

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/agentapi"
)

// logsOf reads GET /hearth/logs with query.
func (ta *testAgent) logsOf(query string) agentapi.Logs {
	ta.t.Helper()
	resp := ta.do("GET", agentapi.LogsPath+query, "", nil, nil)
	require.Equal(ta.t, http.StatusOK, resp.StatusCode)
	var l agentapi.Logs
	require.NoError(ta.t, json.NewDecoder(resp.Body).Decode(&l))
	return l
}

// events renders entries as "event level message" lines.
func events(l []agentapi.LogEntry) []string {
	var out []string
	for _, e := range l {
		out = append(out, e.Event+" "+e.Level+" "+e.Message)
	}
	return out
}

func TestLog_RecordsStartOutputExitAndErrorsButNoEnvironment(t *testing.T) {
	ta := startAgent(t, func(o *Options) { o.Env = map[string]string{"OPT_SECRET": "opt-secret-value"} })
	b, _ := json.Marshal(agentapi.InitRequest{EnvVars: map[string]string{"INIT_SECRET": "init-secret-value"}})
	require.Equal(t, http.StatusNoContent, ta.do("POST", "/init", "application/json", strings.NewReader(string(b)), nil).StatusCode)

	res := ta.run("echo out-line; echo err-line >&2; printf 'no newline'; exit 3", map[string]string{"REQ_SECRET": "req-secret-value"}, "", nil)
	require.Equal(t, float64(3), res.end["exitCode"])
	pid := int(res.pid)
	// A command that cannot start is the agent's error.
	_, next := ta.streamCall("process.Process/Start", map[string]any{"process": map[string]any{"cmd": "/nonexistent/cmd"}}, nil)
	for {
		if _, ok := next(); !ok {
			break
		}
	}

	l := ta.logsOf("")
	ev := events(l.Entries)
	require.Equal(t, "start info /bin/bash -c \"echo out-line; echo err-line >&2; printf 'no newline'; exit 3\"", ev[0])
	require.ElementsMatch(t, []string{"stdout info out-line", "stderr info err-line", "stdout info no newline"}, ev[1:4])
	require.Equal(t, "exit info exit status 3", ev[4])
	require.Len(t, ev, 6)
	require.True(t, strings.HasPrefix(ev[5], "error error starting \"/nonexistent/cmd\""), ev[5])
	for _, e := range l.Entries[:5] {
		require.Equal(t, pid, e.Pid)
		require.False(t, e.Time.IsZero())
	}
	raw, _ := json.Marshal(l)
	for _, secret := range []string{"opt-secret-value", "init-secret-value", "req-secret-value", "OPT_SECRET", "INIT_SECRET", "REQ_SECRET"} {
		require.NotContains(t, string(raw), secret, "the log holds the environment")
	}
}

func TestLog_QuerySelectsSinceTailAndLimit(t *testing.T) {
	ta := startAgent(t, nil)
	ta.run("for i in 1 2 3 4 5; do echo line-$i; done", nil, "", nil)
	all := ta.logsOf("").Entries
	require.Len(t, all, 7) // start, 5 lines, exit
	require.Equal(t, []string{"stdout info line-4", "stdout info line-5"}, events(ta.logsOf("?tail=3&limit=2").Entries[:2]))
	require.Equal(t, []string{"start info /bin/bash -c \"for i in 1 2 3 4 5; do echo line-$i; done\""}, events(ta.logsOf("?limit=1").Entries))
	future := time.Now().Add(time.Hour).UnixMilli()
	require.Empty(t, ta.logsOf("?since="+strconv.FormatInt(future, 10)).Entries)
	for _, bad := range []string{"?limit=-1", "?tail=x", "?since=1.5"} {
		require.Equal(t, http.StatusBadRequest, ta.do("GET", agentapi.LogsPath+bad, "", nil, nil).StatusCode, bad)
	}
	// The log is the node's: it needs the token like every route.
	resp, err := http.Get(ta.url + agentapi.LogsPath)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

func TestLogRing_KeepsTheNewestWithinItsBound(t *testing.T) {
	l := newLogRing(10 * (agentapi.LogEntryOverhead + 10))
	for i := range 25 {
		l.add(agentapi.LogStdout, 1, strings.Repeat(string(rune('a'+i)), 10), false)
	}
	got := l.snapshot(agentapi.LogsQuery{})
	require.Len(t, got.Entries, 10)
	require.Equal(t, int64(15), got.Dropped)
	require.Equal(t, strings.Repeat("p", 10), got.Entries[0].Message) // the 16th
	require.Equal(t, strings.Repeat("y", 10), got.Entries[9].Message) // the last
	require.LessOrEqual(t, l.bytes, l.max)

	// One entry larger than the bound replaces everything but is kept.
	l.add(agentapi.LogStdout, 1, strings.Repeat("z", 2000), false)
	got = l.snapshot(agentapi.LogsQuery{})
	require.Len(t, got.Entries, 1)
}

func TestLogLines_CutsLongLinesAndKeepsWriteBoundaries(t *testing.T) {
	l := newLogRing(agentapi.MaxLogBytes)
	w := &logLines{log: l, event: agentapi.LogStdout, pid: 7}
	long := strings.Repeat("x", agentapi.MaxLogLine+100)
	w.write([]byte("par"))
	w.write([]byte("tial\n" + long[:50]))
	w.write([]byte(long[50:] + "\nshort\n\n"))
	// A multi-byte rune across the cut is not split.
	w.write([]byte(strings.Repeat("é", agentapi.MaxLogLine) + "\n"))
	w.write([]byte("tail"))
	w.flush()
	got := l.snapshot(agentapi.LogsQuery{}).Entries
	require.Len(t, got, 6)
	require.Equal(t, "partial", got[0].Message)
	require.Equal(t, long[:agentapi.MaxLogLine], got[1].Message)
	require.True(t, got[1].Truncated)
	require.Equal(t, "short", got[2].Message)
	require.False(t, got[2].Truncated)
	require.Equal(t, "", got[3].Message)
	require.True(t, got[4].Truncated)
	require.Equal(t, strings.Repeat("é", agentapi.MaxLogLine/2), got[4].Message)
	require.Equal(t, "tail", got[5].Message)

	// A line that only ever grows costs MaxLogLine, not its length.
	for range 1000 {
		w.write([]byte(strings.Repeat("y", 1<<10)))
	}
	require.LessOrEqual(t, cap(w.pending), 2*agentapi.MaxLogLine)
}

func TestLog_PtyOutputIsNotRecorded(t *testing.T) {
	ta := startAgent(t, nil)
	proc := map[string]any{"cmd": "/bin/bash", "args": []string{"-c", "echo typed-secret"}}
	_, next := ta.streamCall("process.Process/Start", map[string]any{"process": proc, "pty": map[string]any{"size": map[string]any{"cols": 80, "rows": 24}}}, nil)
	for {
		if _, ok := next(); !ok {
			break
		}
	}
	ev := events(ta.logsOf("").Entries)
	require.Len(t, ev, 2, "%v", ev)
	require.Equal(t, "start info /bin/bash -c \"echo typed-secret\"", ev[0])
	require.Equal(t, "exit info exit status 0", ev[1])
}

func TestCommandLine_QuotesWhatASpaceWouldSplit(t *testing.T) {
	for _, c := range []struct {
		cmd  string
		args []string
		want string
	}{
		{"ls", []string{"-l", "/tmp"}, "ls -l /tmp"},
		{"sh", []string{"-c", "a b"}, `sh -c "a b"`},
		{"x", []string{"", "new\nline"}, `x "" "new\nline"`},
	} {
		require.Equal(t, c.want, commandLine(c.cmd, c.args))
	}
}

// BenchmarkLogLines measures what the log costs a process's output: a
// flood of 2-byte lines (its worst case) and 80-byte ones.
func BenchmarkLogLines(b *testing.B) {
	for _, n := range []int{2, 80} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			w := &logLines{log: newLogRing(agentapi.MaxLogBytes), event: agentapi.LogStdout, pid: 1}
			chunk := []byte(strings.Repeat(strings.Repeat("y", n-1)+"\n", 32<<10/n))
			b.SetBytes(int64(len(chunk)))
			for b.Loop() {
				w.write(chunk)
			}
		})
	}
}

// A command run through agent-sandbox's runtime API (POST /execute, what
// the router and `kubectl sandbox exec` send) is in the log as one started
// through envd's: its command, output lines and exit, not its environment.
func TestLog_RuntimeExecuteIsRecorded(t *testing.T) {
	ta := startAgent(t, func(o *Options) { o.Env = map[string]string{"OPT_SECRET": "opt-secret-value"} })
	resp := ta.do("POST", agentapi.RuntimePrefix+"/execute", "application/json",
		strings.NewReader(`{"command":"echo rt-out; echo rt-err >&2; exit 4"}`), nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp.Body.Close()
	l := ta.logsOf("")
	ev := events(l.Entries)
	require.Len(t, ev, 4, "%q", ev)
	require.Equal(t, `start info /bin/sh -c "echo rt-out; echo rt-err >&2; exit 4"`, ev[0])
	require.ElementsMatch(t, []string{"stdout info rt-out", "stderr info rt-err"}, ev[1:3])
	require.Equal(t, "exit info exit status 4", ev[3])
	for _, e := range l.Entries {
		require.NotZero(t, e.Pid)
	}
	raw, _ := json.Marshal(l)
	require.NotContains(t, string(raw), "opt-secret-value")
}
