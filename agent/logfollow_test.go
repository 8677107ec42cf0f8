package agent

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/agentapi"
)

func (ta *testAgent) client() agentapi.Client {
	return agentapi.Client{Addr: strings.TrimPrefix(ta.url, "http://"), Token: testToken}
}

// followers is the count of follows the agent serves now.
func (l *logRing) followerCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.followers
}

// waitFollowers polls (with a deadline) until the agent serves n follows.
func waitFollowers(t *testing.T, l *logRing, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for l.followerCount() != n {
		if time.Now().After(deadline) {
			t.Fatalf("the agent serves %d follows, want %d", l.followerCount(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestLogFollow_GetsEntriesWrittenAfterItStartedAndEndsWithItsContext(t *testing.T) {
	ta := startAgent(t, nil)
	ta.a.log.add(agentapi.LogStdout, 3, "before", false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := ta.client()
	st, err := c.FollowLogs(ctx, agentapi.LogsQuery{})
	require.NoError(t, err)
	defer st.Close()
	e, err := st.Next()
	require.NoError(t, err)
	require.Equal(t, "before", e.Message)

	// Written once the follower has read everything: it waits, then gets it.
	ta.a.log.add(agentapi.LogStderr, 4, "after", false)
	e, err = st.Next()
	require.NoError(t, err)
	require.Equal(t, agentapi.LogEntry{Time: e.Time, Level: agentapi.LogLevelInfo, Event: agentapi.LogStderr, Pid: 4, Message: "after"}, e)
	// A real process's output too.
	res := ta.run("echo from-a-process", nil, "", nil)
	require.Equal(t, float64(0), res.end["exitCode"])
	var got []string
	for len(got) < 3 {
		e, err = st.Next()
		require.NoError(t, err)
		got = append(got, e.Event+" "+e.Message)
	}
	require.Equal(t, "stdout from-a-process", got[1])

	cancel()
	_, err = st.Next()
	require.Error(t, err, "the follow ends with its context")
	waitFollowers(t, ta.a.log, 0)
}

func TestLogFollow_TailThenNewEntries(t *testing.T) {
	ta := startAgent(t, nil)
	for _, m := range []string{"one", "two", "three"} {
		ta.a.log.add(agentapi.LogStdout, 1, m, false)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := ta.client()
	st, err := c.FollowLogs(ctx, agentapi.LogsQuery{Tail: 1})
	require.NoError(t, err)
	defer st.Close()
	e, err := st.Next()
	require.NoError(t, err)
	require.Equal(t, "three", e.Message)
	ta.a.log.add(agentapi.LogStdout, 1, "four", false)
	e, err = st.Next()
	require.NoError(t, err)
	require.Equal(t, "four", e.Message)
}

func TestLogFollow_PastTheBoundIs429AndBadQueriesAre400(t *testing.T) {
	ta := startAgent(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := ta.client()
	for range agentapi.MaxLogFollowers {
		st, err := c.FollowLogs(ctx, agentapi.LogsQuery{})
		require.NoError(t, err)
		defer st.Close()
	}
	_, err := c.FollowLogs(ctx, agentapi.LogsQuery{})
	var he *agentapi.HTTPError
	require.True(t, errors.As(err, &he), "%v", err)
	require.Equal(t, http.StatusTooManyRequests, he.Status)

	for _, q := range []string{"?follow=yes", "?follow=true&limit=3"} {
		resp := ta.do("GET", agentapi.LogsPath+q, "", nil, nil)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, q)
	}
	cancel()
	waitFollowers(t, ta.a.log, 0)
}

func TestLogFollow_EndsWhenTheLogCloses(t *testing.T) {
	ta := startAgent(t, nil)
	c := ta.client()
	st, err := c.FollowLogs(context.Background(), agentapi.LogsQuery{})
	require.NoError(t, err)
	defer st.Close()
	waitFollowers(t, ta.a.log, 1)
	ta.a.log.close()
	_, err = st.Next()
	require.ErrorIs(t, err, io.EOF)
}

// A follower behind the bound reads on from the oldest entry held, told
// how many it lost.
func TestLogRing_SinceCountsWhatTheBoundDropped(t *testing.T) {
	l := newLogRing(3 * (agentapi.LogEntryOverhead + 1))
	_, wait, _ := func() ([]agentapi.LogEntry, <-chan struct{}, int64) {
		es, _, lost, wait, _ := l.since(0)
		return es, wait, lost
	}()
	require.NotNil(t, wait, "nothing to read: wait")
	for _, m := range []string{"a", "b", "c", "d", "e"} {
		l.add(agentapi.LogStdout, 1, m, false)
	}
	select {
	case <-wait:
	default:
		t.Fatal("an addition wakes the waiting follower")
	}
	es, next, lost, wait, closed := l.since(0)
	require.False(t, closed)
	require.Nil(t, wait)
	require.Equal(t, int64(2), lost)
	require.Equal(t, int64(5), next)
	require.Len(t, es, 3)
	require.Equal(t, "c", es[0].Message)
	es, next, lost, wait, _ = l.since(next)
	require.Empty(t, es)
	require.Equal(t, int64(5), next)
	require.Zero(t, lost)
	require.NotNil(t, wait)
}
