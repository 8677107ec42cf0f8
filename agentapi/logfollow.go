package agentapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Following a sandbox log: GET LogsPath?follow=true answers 200 and
// streams newline-delimited JSON (LogContentTypeStream), one LogEntry a
// line: first the entries the rest of the query selects (since, tail; a
// limit with follow is a 400), then each entry as the agent writes it,
// until the client goes away or the agent stops. A follower that falls
// more than MaxLogBytes behind loses the entries the bound dropped
// meanwhile and is told so by an entry of the agent's own (LogError, "N
// entries dropped …"). At most MaxLogFollowers follows are served at once;
// one more is a 429.

// MaxLogFollowers bounds the follows one agent serves at once (429
// beyond). The node's own bound per sandbox is below it.
const MaxLogFollowers = 8

// LogContentTypeStream is the content type of a followed log.
const LogContentTypeStream = "application/x-ndjson"

// maxLogStreamLine bounds one line of a followed log: an entry whose
// message (MaxLogLine bytes) is escaped throughout, and its fields.
const maxLogStreamLine = 6*MaxLogLine + 4<<10

// ParseFollow reads the follow parameter of LogsPath's query (and the
// node's logs route): "true" or "1" follows, absent, "false" or "0" does
// not; anything else is an error naming it. A limit with follow is an
// error: a followed log has no last entry to count to.
func ParseFollow(v url.Values) (bool, error) {
	var follow bool
	switch s := v.Get("follow"); s {
	case "", "false", "0":
	case "true", "1":
		follow = true
	default:
		return false, fmt.Errorf("follow must be true or false, got %q", s)
	}
	if follow && v.Get("limit") != "" {
		return false, errors.New("limit and follow: give one (a followed log has no end to count to)")
	}
	return follow, nil
}

// FollowValues is q's query with follow=true.
func FollowValues(q LogsQuery) url.Values {
	v := q.Values()
	v.Del("limit")
	v.Set("follow", "true")
	return v
}

// LogStream reads a followed log (LogContentTypeStream), entry by entry.
type LogStream struct {
	body io.ReadCloser
	sc   *bufio.Scanner
}

// NewLogStream reads the entries of body, a followed log; Close closes it.
func NewLogStream(body io.ReadCloser) *LogStream {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 4<<10), maxLogStreamLine)
	return &LogStream{body: body, sc: sc}
}

// Next blocks for the next entry: io.EOF when the stream ended, another
// error when it broke or carried a line that is not an entry.
func (s *LogStream) Next() (LogEntry, error) {
	for s.sc.Scan() {
		line := s.sc.Bytes()
		if len(line) == 0 {
			continue
		}
		var e LogEntry
		if err := json.Unmarshal(line, &e); err != nil {
			return LogEntry{}, fmt.Errorf("a followed log carried a line that is not an entry: %w", err)
		}
		return e, nil
	}
	if err := s.sc.Err(); err != nil {
		return LogEntry{}, err
	}
	return LogEntry{}, io.EOF
}

// Close ends the stream.
func (s *LogStream) Close() error { return s.body.Close() }

// FollowLogs asks GET LogsPath?follow=true for the entries q selects (its
// Limit ignored) and every later one. The stream lasts until ctx ends,
// the caller closes it or the agent ends it; c.HTTP's Timeout does not
// apply (its Transport does). A refusal is an *HTTPError (429 past
// MaxLogFollowers).
func (c *Client) FollowLogs(ctx context.Context, q LogsQuery) (*LogStream, error) {
	hc := c.httpClient()
	stream := &http.Client{Transport: hc.Transport, CheckRedirect: NoRedirect}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.Addr+LogsPath+"?"+FollowValues(q).Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set(AccessTokenHeader, c.Token)
	req.Header.Set("Accept", LogContentTypeStream)
	resp, err := stream.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxMessage))
		return nil, &HTTPError{Path: LogsPath, Status: resp.StatusCode, Message: strings.TrimSpace(string(b))}
	}
	return NewLogStream(resp.Body), nil
}
