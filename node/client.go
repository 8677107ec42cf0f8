package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// HTTPError is a non-2xx answer from a node.
type HTTPError struct {
	Status  int
	Message string
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("node answered %d: %s", e.Status, e.Message)
}

// StatusOf returns the HTTP status carried by err, or 0.
func StatusOf(err error) int {
	var he *HTTPError
	if errors.As(err, &he) {
		return he.Status
	}
	return 0
}

// ErrNoCapacity is returned (wrapped in an *HTTPError with status 429) when
// the node holds no warm VM for the key.
var ErrNoCapacity = errors.New("no warm capacity on this node")

// Is lets errors.Is(err, ErrNoCapacity) match a 429.
func (e *HTTPError) Is(target error) bool {
	return target == ErrNoCapacity && e.Status == http.StatusTooManyRequests
}

// NotDelivered reports whether err proves that the node did not act on the
// request: a capacity miss, a failure to connect, or a 5xx answer. A timeout
// or reset after the request was sent is not proof: the node may have acted.
func NotDelivered(err error) bool {
	if err == nil {
		return false
	}
	if s := StatusOf(err); s != 0 {
		return s == http.StatusTooManyRequests || s >= 500
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return false
}

// DefaultHTTPClient is shared by clients that are not given one.
var DefaultHTTPClient = &http.Client{
	Timeout: 30 * time.Second,
	Transport: &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
	},
}

// Client speaks the node HTTP API. The zero value is not usable; set Addr.
type Client struct {
	// Addr is host:port or a base URL.
	Addr string
	// Token is sent as a bearer token when non-empty.
	Token string
	// HTTP defaults to DefaultHTTPClient.
	HTTP *http.Client
}

// NewClient returns a client for addr with token.
func NewClient(addr, token string) *Client { return &Client{Addr: addr, Token: token} }

func (c *Client) base() string {
	if strings.Contains(c.Addr, "://") {
		return strings.TrimRight(c.Addr, "/")
	}
	return "http://" + c.Addr
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base()+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = DefaultHTTPClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
	}()
	if resp.StatusCode/100 != 2 {
		var e Error
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if json.Unmarshal(raw, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(raw))
		}
		return &HTTPError{Status: resp.StatusCode, Message: e.Error}
	}
	if out != nil && resp.StatusCode != http.StatusNoContent {
		return json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(out)
	}
	return nil
}

func idPath(id string, rest string) string {
	return "/v1/sandboxes/" + url.PathEscape(id) + rest
}

// Claim transfers one warm VM. A 429 satisfies errors.Is(err, ErrNoCapacity).
func (c *Client) Claim(ctx context.Context, req ClaimRequest) (ClaimResult, error) {
	var out ClaimResult
	err := c.do(ctx, http.MethodPost, "/v1/claim", req, &out)
	return out, err
}

// Release destroys a claimed sandbox. A 404 is returned as an error.
func (c *Client) Release(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, idPath(id, "/release"), nil, nil)
}

// Get looks a sandbox up by claim id.
func (c *Client) Get(ctx context.Context, id string) (Sandbox, error) {
	var out Sandbox
	err := c.do(ctx, http.MethodGet, idPath(id, ""), nil, &out)
	return out, err
}

// GetByRef returns the sandboxes recorded under claim ref "<ns>/<name>".
func (c *Client) GetByRef(ctx context.Context, ref string) ([]Sandbox, error) {
	var out SandboxList
	err := c.do(ctx, http.MethodGet, "/v1/sandboxes?claim_ref="+url.QueryEscape(ref), nil, &out)
	return out.Sandboxes, err
}

// List returns the node's whole claim table.
func (c *Client) List(ctx context.Context) ([]Sandbox, error) {
	var out SandboxList
	err := c.do(ctx, http.MethodGet, "/v1/sandboxes", nil, &out)
	return out.Sandboxes, err
}

// PutPools replaces the node's warm targets.
func (c *Client) PutPools(ctx context.Context, pools []PoolSpec) (Info, error) {
	if pools == nil {
		pools = []PoolSpec{}
	}
	var out Info
	err := c.do(ctx, http.MethodPut, "/v1/pools", PoolsRequest{Pools: pools}, &out)
	return out, err
}

// Info returns the node's pools and counters.
func (c *Client) Info(ctx context.Context) (Info, error) {
	var out Info
	err := c.do(ctx, http.MethodGet, "/v1/info", nil, &out)
	return out, err
}

// Hibernate pauses a sandbox (idempotent).
func (c *Client) Hibernate(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, idPath(id, "/hibernate"), nil, nil)
}

// Wake resumes a sandbox (idempotent).
func (c *Client) Wake(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, idPath(id, "/wake"), nil, nil)
}

// Fork clones a sandbox count times (all or nothing).
func (c *Client) Fork(ctx context.Context, id string, req ForkRequest) ([]ClaimResult, error) {
	var out ForkResult
	err := c.do(ctx, http.MethodPost, idPath(id, "/fork"), req, &out)
	return out.Children, err
}

// Checkpoint snapshots a sandbox; the source keeps running.
func (c *Client) Checkpoint(ctx context.Context, id, name string) (Checkpoint, error) {
	var out CheckpointResult
	err := c.do(ctx, http.MethodPost, idPath(id, "/checkpoint"), CheckpointRequest{Name: name}, &out)
	return out.Checkpoint, err
}

// Checkpoints lists the node's checkpoints, newest first.
func (c *Client) Checkpoints(ctx context.Context) ([]Checkpoint, error) {
	var out CheckpointList
	err := c.do(ctx, http.MethodGet, "/v1/checkpoints", nil, &out)
	return out.Checkpoints, err
}

// DeleteCheckpoint removes a checkpoint.
func (c *Client) DeleteCheckpoint(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/checkpoints/"+url.PathEscape(id), nil, nil)
}

// Branch claims a new sandbox cloned from a checkpoint (it has no claim ref).
func (c *Client) Branch(ctx context.Context, checkpointID string, ttlSeconds int64) (ClaimResult, error) {
	var out ClaimResult
	err := c.do(ctx, http.MethodPost, "/v1/checkpoints/"+url.PathEscape(checkpointID)+"/claim", BranchRequest{TTLSeconds: ttlSeconds}, &out)
	return out, err
}

// Renew sets a sandbox's lease to ttlSeconds from now (clamped by the node).
func (c *Client) Renew(ctx context.Context, id string, ttlSeconds int64) (time.Time, error) {
	var out RenewResult
	err := c.do(ctx, http.MethodPost, idPath(id, "/renew"), RenewRequest{TTLSeconds: ttlSeconds}, &out)
	return out.Deadline, err
}

// Stats measures a sandbox.
func (c *Client) Stats(ctx context.Context, id string) (Stats, error) {
	var out Stats
	err := c.do(ctx, http.MethodGet, idPath(id, "/stats"), nil, &out)
	return out, err
}
