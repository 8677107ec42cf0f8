package qemu

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/internal/uds"
)

// syncTimeout bounds the guest's flush before a Shutdown: a guest that
// does not finish by then is stopped with what its disk holds.
const syncTimeout = 30 * time.Second

// Shutdown implements vmm.Shutdowner: the guest flushes its file systems
// (sync, run as root through its agent), QEMU quits (flushing disk.qcow2)
// and the record says Restore boots the VM again from its disk — a new
// boot, no memory kept (Stop, by contrast, checkpoints the memory).
// Idempotent.
func (d *Driver) Shutdown(ctx context.Context, h vmm.Handle) (vmm.Handle, error) {
	defer d.lock(h.ID)()
	rec, err := d.load(h)
	if err != nil {
		return h, err
	}
	dir := rec.Handle.Dir
	if rec.Shutdown && !pidAlive(rec.Handle.PID, filepath.Join(dir, "qmp.sock")) {
		return rec.Handle, nil
	}
	q, err := d.live(ctx, rec)
	if err != nil {
		return h, err
	}
	defer q.Close()
	st, err := q.QueryStatus(ctx)
	if err != nil {
		return h, err
	}
	if !st.Running {
		if err := q.Execute(ctx, "cont", nil, nil); err != nil {
			return h, err
		}
	}
	sctx, cancel := context.WithTimeout(ctx, syncTimeout)
	err = syncGuest(sctx, rec.Handle.Addr, rec.Handle.Token)
	cancel()
	if err != nil {
		d.o.Logf("qemu: vm %s: the guest's sync before shutdown: %v (stopping with what its disk holds)", h.ID, err)
	}
	_ = q.Execute(ctx, "quit", nil, nil)
	d.kill(rec.Handle.PID, dir)
	d.stopEgress(rec.Handle.ID)
	if rec.MemShared {
		_ = os.Remove(rec.MemPath)
	}
	// An earlier Stop's memory checkpoint must not be what Restore starts.
	_ = os.RemoveAll(filepath.Join(dir, "stopped"))
	rec.Shutdown = true
	rec.Handle.PID, rec.Handle.Paused = 0, false
	if err := uds.WriteJSON(filepath.Join(dir, "vm.json"), rec); err != nil {
		return h, err
	}
	return rec.Handle, nil
}

// bootAgain cold-boots rec, which Shutdown left, from its disk with fresh
// RAM (a shared file mapping, as Boot's).
func (d *Driver) bootAgain(ctx context.Context, rec record) (vmm.Handle, error) {
	dir := rec.Handle.Dir
	rec.Shutdown, rec.OOMBase = false, 0 // a new boot: its kernel counts OOM kills from 0
	rec.MemPath, rec.MemShared = filepath.Join(dir, "mem"), true
	_ = os.Remove(rec.MemPath)
	rec.Handle.Paused = false
	out, err := d.launch(ctx, &rec, "", d.o.BootTimeout)
	if err != nil {
		d.kill(rec.Handle.PID, dir)
		return rec.Handle, err
	}
	return out, nil
}

// syncGuest runs sync(1) as root in the guest through its agent
// (process.Process/Start, the Connect protocol's JSON codec) and waits for
// it to end. The guest answers it: every frame is bounded.
func syncGuest(ctx context.Context, addr, token string) error {
	msg, err := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/run/hearth/busybox", "args": []string{"sync"}}})
	if err != nil {
		return err
	}
	body := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(body[1:], uint32(len(msg)))
	body = append(body, msg...)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/process.Process/Start", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set(agentapi.AccessTokenHeader, token)
	req.SetBasicAuth("root", "")
	resp, err := agentapi.DefaultHTTPClient.Do(req) // no proxy, no redirect: the guest answers
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("agent answered %s", resp.Status)
	}
	exit := -1
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(resp.Body, hdr[:]); err != nil {
			return fmt.Errorf("the stream ended before the process: %w", err)
		}
		n := binary.BigEndian.Uint32(hdr[1:])
		if n > 64<<10 {
			return fmt.Errorf("a frame of %d bytes", n)
		}
		payload := make([]byte, n)
		if _, err := io.ReadFull(resp.Body, payload); err != nil {
			return err
		}
		if hdr[0]&2 != 0 { // end of stream
			if exit != 0 {
				return fmt.Errorf("sync exited %d: %s", exit, payload)
			}
			return nil
		}
		var f struct {
			Event struct {
				End *struct {
					ExitCode int `json:"exitCode"`
				} `json:"end"`
			} `json:"event"`
		}
		if json.Unmarshal(payload, &f) == nil && f.Event.End != nil {
			exit = f.Event.End.ExitCode
		}
	}
}

var _ vmm.Shutdowner = (*Driver)(nil)
