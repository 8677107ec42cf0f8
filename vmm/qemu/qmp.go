package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"
)

// QMPError is an error reply from QEMU ({"error":{"class","desc"}}).
type QMPError struct {
	Class string `json:"class"`
	Desc  string `json:"desc"`
}

func (e *QMPError) Error() string { return "qmp: " + e.Class + ": " + e.Desc }

// Event is an asynchronous QMP event.
type Event struct {
	Name string          `json:"event"`
	Data json.RawMessage `json:"data,omitempty"`
}

// qmpMessage is any line QEMU sends: a greeting, a reply or an event.
type qmpMessage struct {
	QMP    json.RawMessage `json:"QMP,omitempty"`
	ID     json.RawMessage `json:"id,omitempty"`
	Return json.RawMessage `json:"return,omitempty"`
	Error  *QMPError       `json:"error,omitempty"`
	Event  string          `json:"event,omitempty"`
	Data   json.RawMessage `json:"data,omitempty"`
}

// errQMPClosed is returned for commands pending or issued after the
// connection ended (QEMU quit or the socket closed).
var errQMPClosed = errors.New("qmp: connection closed")

// QMP is a client for one QEMU monitor socket. It reads the greeting,
// negotiates capabilities, then runs commands (one at a time is not
// required: replies are matched by id) and collects events.
type QMP struct {
	conn net.Conn

	wmu sync.Mutex // serialises writes

	mu      sync.Mutex
	nextID  uint64
	pending map[string]chan qmpMessage
	events  []Event
	evWake  chan struct{} // closed and replaced whenever an event arrives
	err     error         // set once the reader stops
	done    chan struct{}
}

// DialQMP connects to the QMP unix socket at path, reads the greeting and
// sends qmp_capabilities. ctx bounds the handshake.
func DialQMP(ctx context.Context, path string) (*QMP, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	return newQMP(ctx, conn)
}

func newQMP(ctx context.Context, conn net.Conn) (*QMP, error) {
	q := &QMP{conn: conn, pending: map[string]chan qmpMessage{}, evWake: make(chan struct{}), done: make(chan struct{})}
	r := bufio.NewReaderSize(conn, 64<<10)
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetReadDeadline(dl)
	}
	line, err := r.ReadBytes('\n')
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("qmp greeting: %w", err)
	}
	var g qmpMessage
	if err := json.Unmarshal(line, &g); err != nil || g.QMP == nil {
		conn.Close()
		return nil, fmt.Errorf("qmp greeting: unexpected %q", truncate(line))
	}
	_ = conn.SetReadDeadline(time.Time{})
	go q.readLoop(r)
	if err := q.Execute(ctx, "qmp_capabilities", nil, nil); err != nil {
		q.Close()
		return nil, err
	}
	return q, nil
}

func (q *QMP) readLoop(r *bufio.Reader) {
	var err error
	for {
		var line []byte
		line, err = r.ReadBytes('\n')
		if len(line) > 0 {
			var m qmpMessage
			if json.Unmarshal(line, &m) == nil {
				q.dispatch(m)
			}
		}
		if err != nil {
			break
		}
	}
	q.mu.Lock()
	q.err = errQMPClosed
	for id, ch := range q.pending {
		close(ch)
		delete(q.pending, id)
	}
	close(q.evWake)
	q.mu.Unlock()
	close(q.done)
}

func (q *QMP) dispatch(m qmpMessage) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if m.Event != "" {
		q.events = append(q.events, Event{Name: m.Event, Data: m.Data})
		close(q.evWake)
		q.evWake = make(chan struct{})
		return
	}
	var id string
	if json.Unmarshal(m.ID, &id) != nil {
		return
	}
	if ch, ok := q.pending[id]; ok {
		delete(q.pending, id)
		ch <- m
	}
}

// Execute runs command with args (marshalled as "arguments"; nil for none)
// and decodes the "return" value into out (nil to discard). A QEMU error
// reply is a *QMPError.
func (q *QMP) Execute(ctx context.Context, command string, args, out any) error {
	q.mu.Lock()
	if q.err != nil {
		q.mu.Unlock()
		return q.err
	}
	q.nextID++
	id := "h" + strconv.FormatUint(q.nextID, 10)
	ch := make(chan qmpMessage, 1)
	q.pending[id] = ch
	q.mu.Unlock()

	req := map[string]any{"execute": command, "id": id}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		q.forget(id)
		return err
	}
	q.wmu.Lock()
	if dl, ok := ctx.Deadline(); ok {
		_ = q.conn.SetWriteDeadline(dl)
	}
	_, err = q.conn.Write(append(b, '\n'))
	_ = q.conn.SetWriteDeadline(time.Time{})
	q.wmu.Unlock()
	if err != nil {
		q.forget(id)
		return fmt.Errorf("qmp %s: %w", command, err)
	}
	select {
	case m, ok := <-ch:
		if !ok {
			return fmt.Errorf("qmp %s: %w", command, errQMPClosed)
		}
		if m.Error != nil {
			return m.Error
		}
		if out != nil && len(m.Return) > 0 {
			if err := json.Unmarshal(m.Return, out); err != nil {
				return fmt.Errorf("qmp %s: decoding reply: %w", command, err)
			}
		}
		return nil
	case <-ctx.Done():
		q.forget(id)
		return fmt.Errorf("qmp %s: %w", command, ctx.Err())
	}
}

func (q *QMP) forget(id string) {
	q.mu.Lock()
	delete(q.pending, id)
	q.mu.Unlock()
}

// WaitEvent returns the first event named name received since the
// connection opened (events already seen count), consuming it. It fails
// when ctx ends or the connection closes first.
func (q *QMP) WaitEvent(ctx context.Context, name string) (Event, error) {
	for {
		q.mu.Lock()
		for i, e := range q.events {
			if e.Name == name {
				q.events = append(q.events[:i], q.events[i+1:]...)
				q.mu.Unlock()
				return e, nil
			}
		}
		if q.err != nil {
			q.mu.Unlock()
			return Event{}, q.err
		}
		wake := q.evWake
		q.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// Done is closed once the connection has ended.
func (q *QMP) Done() <-chan struct{} { return q.done }

// Close closes the connection.
func (q *QMP) Close() error { return q.conn.Close() }

// Status is query-status's reply.
type Status struct {
	Running bool   `json:"running"`
	Status  string `json:"status"`
}

// QueryStatus runs query-status.
func (q *QMP) QueryStatus(ctx context.Context) (Status, error) {
	var s Status
	err := q.Execute(ctx, "query-status", nil, &s)
	return s, err
}

// MigrationInfo is the part of query-migrate's reply the driver reads.
type MigrationInfo struct {
	Status    string `json:"status"`
	ErrorDesc string `json:"error-desc,omitempty"`
}

func truncate(b []byte) []byte {
	if len(b) > 200 {
		return b[:200]
	}
	return b
}
