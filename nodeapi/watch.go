package nodeapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// WatchEventType is the kind of a node change-stream event
// (docs/API.md#node-api, GET /v1/watch).
type WatchEventType string

// Change-stream event types.
const (
	// WatchSnapshot carries the node's whole claim table and pools at Rev;
	// it replaces everything the subscriber knew of the node. A stream
	// opens with one unless the subscriber's position is still in the
	// node's ring (same epoch, revision not evicted).
	WatchSnapshot WatchEventType = "SNAPSHOT"
	// WatchPut is a claimed sandbox that appeared or changed (claim, fork
	// child, snapshot claim, pause, resume, lease renewal).
	WatchPut WatchEventType = "PUT"
	// WatchDelete is a sandbox that left the claim table (release, lease
	// expiry); Sandbox carries its last record.
	WatchDelete WatchEventType = "DELETE"
	// WatchPool is a warm pool's new row; Warm = Target = 0 means the pool
	// is gone.
	WatchPool WatchEventType = "POOL"
	// WatchKeepalive carries no change; it is sent when the stream has
	// been idle for the keepalive period, with the current Epoch and Rev.
	WatchKeepalive WatchEventType = "KEEPALIVE"
)

// WatchEvent is one line of GET /v1/watch (newline-delimited JSON).
//
// Rev is node-local and strictly increasing within one Epoch; every change
// event advances it by one, so a subscriber that sees a gap has lost
// events (it never should: the node sends a SNAPSHOT instead). Epoch is
// the node's boot id: a new process starts a new epoch with revisions
// from 1, and a subscriber that sees a different epoch than it asked for
// gets a SNAPSHOT first.
type WatchEvent struct {
	Type  WatchEventType `json:"type"`
	Epoch string         `json:"epoch"`
	Rev   uint64         `json:"rev"`
	// Sandbox is the record of a PUT or DELETE: what a NodeInventory
	// entry carries (labels, annotations, e2b visibility) and the claim's
	// metadata, never a token, spec or managed fields (a lookup of the
	// sandbox on its node returns those).
	Sandbox *Sandbox `json:"sandbox,omitempty"`
	// Pool is the row of a POOL event.
	Pool *PoolInfo `json:"pool,omitempty"`
	// Snapshot is the state of a SNAPSHOT event.
	Snapshot *WatchState `json:"snapshot,omitempty"`
}

// WatchState is a node's whole state in a SNAPSHOT event.
type WatchState struct {
	Node      string     `json:"node"`
	NodeAddr  string     `json:"node_addr"`
	Sandboxes []Sandbox  `json:"sandboxes"`
	Pools     []PoolInfo `json:"pools"`
}

// WatchPosition is where a subscriber resumes: the epoch and revision of
// the last event it applied. The zero value asks for a SNAPSHOT.
type WatchPosition struct {
	Epoch string
	Rev   uint64
}

// Query renders p as the query of GET /v1/watch.
func (p WatchPosition) Query() string {
	if p.Epoch == "" {
		return ""
	}
	return "?epoch=" + url.QueryEscape(p.Epoch) + "&since=" + strconv.FormatUint(p.Rev, 10)
}

// DefaultWatchIdle is how long Watch waits for a line (an event or a
// keepalive) before it gives the stream up as dead.
const DefaultWatchIdle = 30 * time.Second

// ErrWatchIdle is returned by Watch when the node sent nothing, not even
// a keepalive, for the idle period.
var ErrWatchIdle = errors.New("node change stream idle past its keepalive")

// Watch opens the node's change stream at from and calls fn for every
// event, in order, until ctx ends, fn returns an error, the node closes the
// stream, or nothing arrives for idle (0 means DefaultWatchIdle). It
// always returns a non-nil error (ctx.Err() when ctx ended). A node
// without the route answers 404 (errors.Is(err, ErrNotFound)).
//
// The stream outlives any http.Client.Timeout: Watch uses c.HTTP's
// transport without its overall timeout and bounds only the idle time.
func (c *Client) Watch(ctx context.Context, from WatchPosition, idle time.Duration, fn func(WatchEvent) error) error {
	if idle <= 0 {
		idle = DefaultWatchIdle
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base()+"/v1/watch"+from.Query(), nil)
	if err != nil {
		return err
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	req.Header.Set("Accept", "application/x-ndjson")
	hc := c.HTTP
	if hc == nil {
		hc = DefaultHTTPClient
	}
	stream := &http.Client{Transport: hc.Transport, CheckRedirect: hc.CheckRedirect, Jar: hc.Jar}
	// The idle timer covers the response headers too.
	timer := time.AfterFunc(idle, func() { cancel(ErrWatchIdle) })
	defer timer.Stop()
	resp, err := stream.Do(req)
	if err != nil {
		if cause := context.Cause(ctx); errors.Is(cause, ErrWatchIdle) {
			return ErrWatchIdle
		}
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e Error
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if json.Unmarshal(raw, &e) != nil || e.Error == "" {
			e.Error = string(raw)
		}
		return &HTTPError{Status: resp.StatusCode, Message: e.Error}
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 256<<20) // a SNAPSHOT line holds a whole table
	for sc.Scan() {
		timer.Reset(idle)
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		var ev WatchEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return fmt.Errorf("node change stream: decoding an event: %w", err)
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
	if cause := context.Cause(ctx); cause != nil {
		if errors.Is(cause, ErrWatchIdle) {
			return ErrWatchIdle
		}
		return cause
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return io.ErrUnexpectedEOF
}
