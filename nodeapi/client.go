package nodeapi

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/internal/httpjson"
)

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
	hc := c.HTTP
	if hc == nil {
		hc = DefaultHTTPClient
	}
	call := httpjson.Call{Method: method, URL: c.base() + path, Header: "Authorization", In: in, Out: out}
	if c.Token != "" {
		call.Value = "Bearer " + c.Token
	}
	err := call.Do(ctx, hc)
	var he *httpjson.Error
	if errors.As(err, &he) {
		var e Error
		if json.Unmarshal(he.Body, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(he.Body))
		}
		return &HTTPError{Status: he.Status, Message: e.Error}
	}
	return err
}

func idPath(id string, rest string) string {
	return "/v1/sandboxes/" + url.PathEscape(id) + rest
}

// Claim transfers one warm VM. A 429 satisfies errors.Is(err, ErrNoCapacity).
func (c *Client) Claim(ctx context.Context, req ClaimRequest) (Sandbox, error) {
	var out Sandbox
	err := c.do(ctx, http.MethodPost, "/v1/claim", req, &out)
	return out, err
}

// Release destroys a claimed sandbox. A 404 satisfies errors.Is(err, ErrNotFound).
func (c *Client) Release(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, idPath(id, "/release"), nil, nil)
}

// Get looks a sandbox up by claim id.
func (c *Client) Get(ctx context.Context, id string) (Sandbox, error) {
	var out Sandbox
	err := c.do(ctx, http.MethodGet, idPath(id, ""), nil, &out)
	return out, err
}

// GetByRef returns the sandboxes recorded under claim ref "<ns>/<name>",
// oldest claim first; none is a 404.
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

// Pause pauses a sandbox (idempotent).
func (c *Client) Pause(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, idPath(id, "/pause"), nil, nil)
}

// PauseWith pauses a sandbox as req asks (PauseRequest).
func (c *Client) PauseWith(ctx context.Context, id string, req PauseRequest) error {
	return c.do(ctx, http.MethodPost, idPath(id, "/pause"), req, nil)
}

// Resume resumes a paused sandbox (idempotent).
func (c *Client) Resume(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, idPath(id, "/resume"), nil, nil)
}

// Fork clones a sandbox count times (all or nothing).
func (c *Client) Fork(ctx context.Context, id string, req ForkRequest) ([]Sandbox, error) {
	var out ForkResult
	err := c.do(ctx, http.MethodPost, idPath(id, "/fork"), req, &out)
	return out.Children, err
}

// Snapshot snapshots a sandbox; the source keeps running.
func (c *Client) Snapshot(ctx context.Context, id, name string) (Snapshot, error) {
	var out SnapshotResult
	err := c.do(ctx, http.MethodPost, idPath(id, "/snapshot"), SnapshotRequest{Name: name}, &out)
	return out.Snapshot, err
}

// Snapshots lists the node's snapshots, newest first.
func (c *Client) Snapshots(ctx context.Context) ([]Snapshot, error) {
	var out SnapshotList
	err := c.do(ctx, http.MethodGet, "/v1/snapshots", nil, &out)
	return out.Snapshots, err
}

// DeleteSnapshot removes a snapshot.
func (c *Client) DeleteSnapshot(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/snapshots/"+url.PathEscape(id), nil, nil)
}

// PromoteSnapshot keeps a snapshot after its sandbox is released (root).
func (c *Client) PromoteSnapshot(ctx context.Context, id string) (Snapshot, error) {
	var out Snapshot
	err := c.do(ctx, http.MethodPost, "/v1/snapshots/"+url.PathEscape(id)+"/promote", nil, &out)
	return out, err
}

// ClaimSnapshot claims a new sandbox cloned from a snapshot (it has no claim ref).
func (c *Client) ClaimSnapshot(ctx context.Context, snapshotID string, ttlSeconds int64) (Sandbox, error) {
	return c.ClaimSnapshotAs(ctx, snapshotID, SnapshotClaimRequest{TTLSeconds: ttlSeconds})
}

// ClaimSnapshotAs claims a new sandbox cloned from a snapshot, named by
// req.ClaimRef when set (a 409 when that name is held).
func (c *Client) ClaimSnapshotAs(ctx context.Context, snapshotID string, req SnapshotClaimRequest) (Sandbox, error) {
	var out Sandbox
	err := c.do(ctx, http.MethodPost, "/v1/snapshots/"+url.PathEscape(snapshotID)+"/claim", req, &out)
	return out, err
}

// SetLabels replaces a sandbox's recorded labels, annotations and managed
// fields (PUT /v1/sandboxes/{id}/labels) and returns the updated record. A
// stale req.Version is a 409.
func (c *Client) SetLabels(ctx context.Context, id string, req LabelsRequest) (Sandbox, error) {
	var out Sandbox
	err := c.do(ctx, http.MethodPut, idPath(id, "/labels"), req, &out)
	return out, err
}

// Renew sets a sandbox's lease to ttlSeconds from now (clamped by the node)
// and returns its new deadline.
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

// Logs reads a sandbox's log (GET /v1/sandboxes/{id}/logs): the entries
// q selects, oldest first, as the sandbox's agent keeps them
// (agentapi.Logs). A paused sandbox is a 409, an agent that does not
// answer a 502.
func (c *Client) Logs(ctx context.Context, id string, q agentapi.LogsQuery) (agentapi.Logs, error) {
	var out agentapi.Logs
	path := idPath(id, "/logs")
	if v := q.Values(); len(v) > 0 {
		path += "?" + v.Encode()
	}
	err := c.do(ctx, http.MethodGet, path, nil, &out)
	return out, err
}
