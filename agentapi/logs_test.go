package agentapi_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/agentapi"
)

func TestLogsQuery_ValuesRoundTripAndBadValuesAreRefused(t *testing.T) {
	q := agentapi.LogsQuery{Since: time.UnixMilli(1700000000123), Tail: 5, Limit: 2}
	got, err := agentapi.ParseLogsQuery(q.Values())
	require.NoError(t, err)
	require.True(t, q.Since.Equal(got.Since))
	require.Equal(t, q.Tail, got.Tail)
	require.Equal(t, q.Limit, got.Limit)
	require.Empty(t, agentapi.LogsQuery{}.Values())
	for _, bad := range []string{"since=-1", "tail=x", "limit=1e3", "limit=99999999999999999999"} {
		v, _ := url.ParseQuery(bad)
		_, err := agentapi.ParseLogsQuery(v)
		require.Error(t, err, bad)
	}
}

func TestLogsQuery_SelectsSinceThenTailThenLimit(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(int64(s), 0) }
	var l []agentapi.LogEntry
	for i := range 10 {
		l = append(l, agentapi.LogEntry{Time: at(i), Message: string(rune('a' + i))})
	}
	msgs := func(q agentapi.LogsQuery) string {
		var s string
		for _, e := range q.Select(l) {
			s += e.Message
		}
		return s
	}
	for _, c := range []struct {
		q    agentapi.LogsQuery
		want string
	}{
		{agentapi.LogsQuery{}, "abcdefghij"},
		{agentapi.LogsQuery{Since: at(7)}, "hij"},
		{agentapi.LogsQuery{Tail: 4}, "ghij"},
		{agentapi.LogsQuery{Limit: 2}, "ab"},
		{agentapi.LogsQuery{Since: at(3), Tail: 5, Limit: 2}, "fg"},
		{agentapi.LogsQuery{Since: at(99)}, ""},
	} {
		require.Equal(t, c.want, msgs(c.q), "%+v", c.q)
	}
}

func TestLogEntry_LineShowsOutputAsWrittenAndMarksTheAgentsOwn(t *testing.T) {
	for _, c := range []struct {
		e    agentapi.LogEntry
		want string
	}{
		{agentapi.LogEntry{Event: agentapi.LogStdout, Pid: 3, Message: "hello"}, "hello"},
		{agentapi.LogEntry{Event: agentapi.LogStderr, Pid: 3, Message: "[start pid 1] fake"}, "[start pid 1] fake"},
		{agentapi.LogEntry{Event: agentapi.LogStart, Pid: 3, Message: "ls -l"}, "[start pid 3] ls -l"},
		{agentapi.LogEntry{Event: agentapi.LogExit, Pid: 3, Message: "exit status 1"}, "[exit pid 3] exit status 1"},
		{agentapi.LogEntry{Event: agentapi.LogError, Message: `starting "x": no such file`}, `[error] starting "x": no such file`},
	} {
		require.Equal(t, c.want, c.e.Line())
	}
}
