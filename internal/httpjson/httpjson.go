// Package httpjson is the one JSON-over-HTTP round trip of the project's
// small wire clients (agentapi.Client for the agent, nodeapi.Client for the
// node): marshal the request body, set the one credential header, send,
// and either decode a 2xx answer or return a non-2xx answer's status and
// its body's first bytes as an *Error, for each client to turn into its
// own error type. Marshal, request and transport errors come back as they
// are (a caller tells a timeout from a refused connection).
//
// Every read is bounded: an error body by Call.ErrLimit, a decoded answer
// by MaxAnswer, and what is left of a body is drained (at most MaxDrain)
// so the connection can be reused. It links the standard library only
// (internal/deps), as agentapi must.
package httpjson

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

const (
	// DefaultErrLimit is Call.ErrLimit's default.
	DefaultErrLimit = 64 << 10
	// MaxAnswer bounds the body decoded into Call.Out.
	MaxAnswer = 64 << 20
	// MaxDrain bounds what is read of a body nobody needs, before it is
	// closed.
	MaxDrain = 1 << 20
)

// Call is one round trip.
type Call struct {
	Method string
	// URL is absolute ("http://host:port/path").
	URL string
	// Header and Value are the credential: Header is set to Value when
	// Value is non-empty.
	Header, Value string
	// In, when non-nil, is sent as JSON (Content-Type: application/json).
	In any
	// Out, when non-nil, receives a 2xx answer's JSON (unless 204).
	Out any
	// ErrLimit bounds the part of a non-2xx body kept in Error.Body
	// (default DefaultErrLimit).
	ErrLimit int64
	// OutLimit bounds the 2xx answer decoded into Out (default MaxAnswer):
	// an answer cut short by it is an error.
	OutLimit int64
}

// Error is a non-2xx answer: its status and at most Call.ErrLimit bytes
// of its body, as sent.
type Error struct {
	Status int
	Body   []byte
}

func (e *Error) Error() string { return fmt.Sprintf("answered %d: %s", e.Status, e.Body) }

// Do runs c through hc.
func (c Call) Do(ctx context.Context, hc *http.Client) error {
	var body io.Reader
	if c.In != nil {
		b, err := json.Marshal(c.In)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, c.Method, c.URL, body)
	if err != nil {
		return err
	}
	if c.In != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Value != "" {
		req.Header.Set(c.Header, c.Value)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxDrain))
		resp.Body.Close()
	}()
	if resp.StatusCode/100 != 2 {
		limit := c.ErrLimit
		if limit <= 0 {
			limit = DefaultErrLimit
		}
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, limit))
		return &Error{Status: resp.StatusCode, Body: raw}
	}
	if c.Out != nil && resp.StatusCode != http.StatusNoContent {
		limit := c.OutLimit
		if limit <= 0 {
			limit = MaxAnswer
		}
		return json.NewDecoder(io.LimitReader(resp.Body, limit)).Decode(c.Out)
	}
	return nil
}
