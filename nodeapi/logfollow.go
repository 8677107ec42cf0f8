package nodeapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/hearthvm/hearth/agentapi"
)

// FollowLogs follows a sandbox's log (GET
// /v1/sandboxes/{id}/logs?follow=true): the entries q selects (its Limit
// ignored), then each one as its agent writes it, until ctx ends, the
// caller closes the stream, or the node ends it (the sandbox paused or
// released, the node closing). c.HTTP's Timeout does not apply (its
// Transport does). A paused sandbox is a 409, a follow past the node's or
// the sandbox's bound a 429, an agent that does not answer a 502 (each an
// *HTTPError).
func (c *Client) FollowLogs(ctx context.Context, id string, q agentapi.LogsQuery) (*agentapi.LogStream, error) {
	hc := c.HTTP
	if hc == nil {
		hc = DefaultHTTPClient
	}
	stream := &http.Client{Transport: hc.Transport, CheckRedirect: hc.CheckRedirect, Jar: hc.Jar}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base()+idPath(id, "/logs")+"?"+agentapi.FollowValues(q).Encode(), nil)
	if err != nil {
		return nil, err
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	req.Header.Set("Accept", agentapi.LogContentTypeStream)
	resp, err := stream.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var e Error
		if json.Unmarshal(raw, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(raw))
		}
		return nil, &HTTPError{Status: resp.StatusCode, Message: e.Error}
	}
	return agentapi.NewLogStream(resp.Body), nil
}
