package uds

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/hearthvm/hearth/vmm"
)

// Client speaks HTTP/1.1 JSON to a VMM's API socket.
type Client struct {
	// Path is the unix socket.
	Path string
	http *http.Client
}

// NewClient returns a client for the API socket at path.
func NewClient(path string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	return &Client{Path: path, http: &http.Client{Transport: tr}}
}

// APIError is a non-2xx answer from a VMM.
type APIError struct {
	Method, Path string
	Status       int
	Body         string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s %s: HTTP %d: %s", e.Method, e.Path, e.Status, strings.TrimSpace(e.Body))
}

// Do sends method path with in (nil: no body) JSON-encoded and decodes a 200
// body into out (when out is non-nil). Any non-2xx status is an *APIError.
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s %s: encode: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://localhost"+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return &APIError{Method: method, Path: path, Status: resp.StatusCode, Body: string(b)}
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: decode: %w", method, path, err)
		}
	}
	return nil
}

// Close drops idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// pollBackoff is Poll's wait between tries: 2 ms doubling to 64 ms, then
// 64 ms.
var pollBackoff = wait.Backoff{Duration: 2 * time.Millisecond, Factor: 2, Steps: 5}

// Poll calls f until it returns nil or ctx ends, backing off from 2 ms to
// 64 ms between tries (pollBackoff). It returns f's last error wrapped with
// ctx's.
func Poll(ctx context.Context, f func() error) error {
	last, err := poll(ctx, f)
	if err != nil {
		return fmt.Errorf("%w (last: %v)", err, last)
	}
	return nil
}

// poll is Poll's loop: until's error (nil once f succeeded) and f's last
// error, the one place of the rule that a try ctx's end cut short does not
// replace what an earlier try learned (an agent's 503 says more than
// "deadline exceeded").
func poll(ctx context.Context, f func() error) (last, err error) {
	err = pollBackoff.DelayFunc().Until(ctx, true, true, func(context.Context) (bool, error) {
		e := f()
		if e == nil || last == nil || ctx.Err() == nil {
			last = e
		}
		return e == nil, nil
	})
	return last, err
}

// PollAlive is Poll for a process that may die: it also ends as soon as
// exited closes (a nil exited never does), with an error wrapping
// vmm.ErrVMMExited and f's last error. f gets a context that ends then
// too.
func PollAlive(ctx context.Context, exited <-chan struct{}, f func(context.Context) error) error {
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if exited != nil {
		go func() {
			select {
			case <-exited:
				cancel(vmm.ErrVMMExited)
			case <-pctx.Done():
			}
		}()
	}
	last, err := poll(pctx, func() error { return f(pctx) })
	if err == nil {
		return nil
	}
	if errors.Is(context.Cause(pctx), vmm.ErrVMMExited) {
		return fmt.Errorf("%w (last: %v)", vmm.ErrVMMExited, last)
	}
	return fmt.Errorf("%w (last: %v)", err, last)
}
