package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// fakeQMP is a unix-socket QMP server speaking the real protocol: the
// greeting, capability negotiation (commands before it are refused, as
// QEMU does), replies carrying the request id, error replies and events.
type fakeQMP struct {
	t    *testing.T
	path string
	ln   net.Listener

	mu      sync.Mutex
	running bool
	got     []string // commands received
	conns   []net.Conn
}

func newFakeQMP(t *testing.T) *fakeQMP {
	t.Helper()
	dir, err := os.MkdirTemp("", "qmp")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "qmp.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeQMP{t: t, path: path, ln: ln, running: true}
	go f.serve()
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		for _, c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
		os.RemoveAll(dir)
	})
	return f
}

func (f *fakeQMP) serve() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		f.conns = append(f.conns, c)
		f.mu.Unlock()
		go f.handle(c)
	}
}

func (f *fakeQMP) handle(c net.Conn) {
	defer c.Close()
	w := json.NewEncoder(c)
	_ = w.Encode(map[string]any{"QMP": map[string]any{"version": map[string]any{"qemu": map[string]int{"major": 7, "minor": 2, "micro": 0}}, "capabilities": []string{"oob"}}})
	negotiated := false
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		var req struct {
			Execute   string          `json:"execute"`
			ID        json.RawMessage `json:"id"`
			Arguments json.RawMessage `json:"arguments"`
		}
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			_ = w.Encode(map[string]any{"error": map[string]string{"class": "GenericError", "desc": "JSON parse error"}})
			continue
		}
		f.mu.Lock()
		f.got = append(f.got, req.Execute)
		f.mu.Unlock()
		reply := func(v any) { _ = w.Encode(map[string]any{"return": v, "id": req.ID}) }
		fail := func(class, desc string) {
			_ = w.Encode(map[string]any{"error": map[string]string{"class": class, "desc": desc}, "id": req.ID})
		}
		if !negotiated && req.Execute != "qmp_capabilities" {
			fail("CommandNotFound", "Expecting capabilities negotiation with 'qmp_capabilities'")
			continue
		}
		switch req.Execute {
		case "qmp_capabilities":
			negotiated = true
			reply(map[string]any{})
		case "query-status":
			f.mu.Lock()
			st := map[string]any{"running": f.running, "status": map[bool]string{true: "running", false: "paused"}[f.running], "singlestep": false}
			f.mu.Unlock()
			reply(st)
		case "stop", "cont":
			f.mu.Lock()
			changed := f.running != (req.Execute == "cont")
			f.running = req.Execute == "cont"
			f.mu.Unlock()
			reply(map[string]any{})
			if changed {
				ev := map[string]string{"stop": "STOP", "cont": "RESUME"}[req.Execute]
				_ = w.Encode(map[string]any{"event": ev, "timestamp": map[string]int{"seconds": 1, "microseconds": 2}})
			}
		case "quit":
			reply(map[string]any{})
			_ = w.Encode(map[string]any{"event": "SHUTDOWN", "data": map[string]any{"guest": false, "reason": "host-qmp-quit"}})
			return
		default:
			fail("CommandNotFound", "The command "+req.Execute+" has not been found")
		}
	}
}

func TestQMP_NegotiatesAndRunsCommands(t *testing.T) {
	f := newFakeQMP(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	q, err := DialQMP(ctx, f.path)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	st, err := q.QueryStatus(ctx)
	if err != nil || !st.Running || st.Status != "running" {
		t.Fatalf("query-status = %+v, %v", st, err)
	}
	if err := q.Execute(ctx, "stop", nil, nil); err != nil {
		t.Fatal(err)
	}
	ev, err := q.WaitEvent(ctx, "STOP")
	if err != nil || ev.Name != "STOP" {
		t.Fatalf("STOP event: %+v %v", ev, err)
	}
	if st, _ := q.QueryStatus(ctx); st.Running || st.Status != "paused" {
		t.Fatalf("after stop: %+v", st)
	}
	f.mu.Lock()
	got := append([]string(nil), f.got...)
	f.mu.Unlock()
	if got[0] != "qmp_capabilities" {
		t.Fatalf("first command %q, want qmp_capabilities", got[0])
	}
}

func TestQMP_ErrorReplyIsQMPError(t *testing.T) {
	f := newFakeQMP(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	q, err := DialQMP(ctx, f.path)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	err = q.Execute(ctx, "no-such-command", nil, nil)
	var qe *QMPError
	if !errors.As(err, &qe) || qe.Class != "CommandNotFound" {
		t.Fatalf("err = %v, want CommandNotFound QMPError", err)
	}
	// The connection stays usable after an error reply.
	if _, err := q.QueryStatus(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestQMP_ConcurrentCommandsMatchTheirReplies(t *testing.T) {
	f := newFakeQMP(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	q, err := DialQMP(ctx, f.path)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := 0; i < 20; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			var st Status
			if err := q.Execute(ctx, "query-status", nil, &st); err != nil || st.Status == "" {
				errs <- errors.Join(err, errors.New("empty status"))
			}
		}()
		go func() {
			defer wg.Done()
			if err := q.Execute(ctx, "bogus", nil, nil); err == nil {
				errs <- errors.New("bogus command succeeded")
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestQMP_QuitClosesPendingAndLaterCommands(t *testing.T) {
	f := newFakeQMP(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	q, err := DialQMP(ctx, f.path)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.Execute(ctx, "quit", nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := q.WaitEvent(ctx, "SHUTDOWN"); err != nil {
		t.Fatalf("SHUTDOWN event: %v", err)
	}
	select {
	case <-q.Done():
	case <-ctx.Done():
		t.Fatal("connection not closed after quit")
	}
	if err := q.Execute(ctx, "query-status", nil, nil); !errors.Is(err, errQMPClosed) {
		t.Fatalf("command after close: %v", err)
	}
	if _, err := q.WaitEvent(ctx, "NEVER"); !errors.Is(err, errQMPClosed) {
		t.Fatalf("wait after close: %v", err)
	}
}

func TestQMP_BadGreetingFails(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_, _ = c.Write([]byte("{\"hello\": 1}\n"))
		c.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := DialQMP(ctx, path); err == nil {
		t.Fatal("accepted a non-QMP greeting")
	}
}

func TestQMP_ContextBoundsACommand(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // greets, negotiates, then never answers
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Write([]byte(`{"QMP":{"version":{},"capabilities":[]}}` + "\n"))
		sc := bufio.NewScanner(c)
		sc.Scan()
		var req struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(sc.Bytes(), &req)
		_, _ = c.Write([]byte(`{"return":{},"id":"` + req.ID + `"}` + "\n"))
		for sc.Scan() {
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	q, err := DialQMP(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	short, cancel2 := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel2()
	if err := q.Execute(short, "query-status", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
}

// FuzzQMPSession feeds arbitrary QEMU output to the client: it must fail
// cleanly or work, never panic or hang.
func FuzzQMPSession(f *testing.F) {
	addSeeds(f, "qmp")
	f.Fuzz(func(t *testing.T, b []byte) {
		a, c := net.Pipe()
		defer a.Close()
		go func() {
			_, _ = c.Write(b)
			c.Close()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		q, err := newQMP(ctx, a)
		if err == nil {
			_, _ = q.WaitEvent(ctx, "STOP")
			q.Close()
		}
	})
}
