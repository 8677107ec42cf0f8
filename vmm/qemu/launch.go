package qemu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/internal/uds"
)

// boot cold-boots spec with machine m, leaving nothing behind on failure.
func (d *Driver) boot(ctx context.Context, spec vmm.Spec, m Machine, timeout time.Duration) (vmm.Handle, error) {
	dir := d.vmDir(spec.ID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return vmm.Handle{}, fmt.Errorf("qemu: vm %q already exists", spec.ID)
		}
		return vmm.Handle{}, err
	}
	rec := record{Spec: spec, MemPath: filepath.Join(dir, "mem"), MemShared: true, Restrict: spec.Net != "egress"}
	rec.Handle = vmm.Handle{ID: spec.ID, Backend: Backend, Dir: dir, Token: spec.Token, Hold: spec.Hold}
	rec.Machine = m
	if m.Disk != "" {
		rec.DiskBase = m.Disk
		rec.Machine.Disk = filepath.Join(dir, "disk.qcow2")
		if err := d.newOverlay(ctx, rec.Machine.Disk, m.Disk, diskFormat(m.Disk)); err != nil {
			_ = os.RemoveAll(dir)
			return vmm.Handle{}, err
		}
	}
	h, err := d.launch(ctx, &rec, "", timeout)
	if err != nil {
		d.discard(rec.Handle.ID, rec.Handle.PID, dir)
		return vmm.Handle{}, err
	}
	return h, nil
}

// discard ends a VM that failed to come up (Boot, Clone): its processes,
// its egress lane's filter, resolver and uid, its run directory.
func (d *Driver) discard(id string, pid int, dir string) {
	d.kill(pid, dir)
	_ = d.dropEgress(id, dir)
	_ = os.RemoveAll(dir)
	d.releaseUID(id)
}

// launch starts QEMU for rec (cold boot when incoming is "", else from the
// checkpoint dir incoming), waits for the agent unless the VM stays paused,
// and persists rec. It fills rec.Handle's PID, Addr and Meta.
func (d *Driver) launch(ctx context.Context, rec *record, incoming string, timeout time.Duration) (vmm.Handle, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	dir := rec.Handle.Dir
	m := rec.Machine
	m.QMPSocket = filepath.Join(dir, "qmp.sock")
	m.ConsoleLog = filepath.Join(dir, "console.log")
	m.MemPath, m.MemShared, m.Restrict = rec.MemPath, rec.MemShared, rec.Restrict
	m.NetFD = rec.Spec.Net == "egress"
	if incoming != "" {
		m.Incoming = "defer"
	}
	var uid int
	if m.NetFD {
		if err := d.ensureFirewall(ctx); err != nil {
			return vmm.Handle{}, err
		}
		var err error
		if uid, err = d.allocUID(rec.Handle.ID, dir); err != nil {
			return vmm.Handle{}, err
		}
		// The policies hold before passt makes the guest's first socket.
		if err := d.startEgress(rec, uid, true); err != nil {
			return vmm.Handle{}, err
		}
	}
	// The identity travels as a fw_cfg file, 0600, removed as soon as QEMU
	// has read it (it has once QMP answers: QMP runs after machine init).
	m.Identity = filepath.Join(dir, "identity")
	id := Identity{Token: rec.Spec.Token, Hostname: "hearth-guest", Env: rec.Spec.Env, Hold: rec.Spec.Hold}
	if err := writeFile0600(m.Identity, id.Encode()); err != nil {
		return vmm.Handle{}, err
	}
	defer os.Remove(m.Identity)
	// A host port picked free may be taken before QEMU (or passt) binds
	// it; QEMU then exits (possibly after its QMP socket appeared) saying
	// "host forwarding", or passt exits, and a new port is tried.
	var pid int
	var q *QMP
	var lastErr error
	for attempt := 0; attempt < 4; attempt++ {
		port, err := freePort()
		if err != nil {
			return vmm.Handle{}, err
		}
		m.HostPort = port
		if err := m.Validate(); err != nil {
			return vmm.Handle{}, err
		}
		var netEnd *os.File
		if m.NetFD {
			if _, netEnd, err = d.startPasst(dir, uid, port); err != nil {
				return vmm.Handle{}, err
			}
		}
		pid, lastErr = d.spawn(ctx, dir, m, netEnd)
		if netEnd != nil {
			netEnd.Close()
		}
		if lastErr == nil {
			q, lastErr = dialQMPWhileAlive(ctx, m.QMPSocket, pid)
			if lastErr == nil && m.NetFD && !passtAlive(dir) {
				q.Close()
				lastErr = fmt.Errorf("qemu: host forwarding of port %d: passt exited: %s", port, logTail(filepath.Join(dir, "passt.log"), 0))
				d.kill(pid, dir)
			} else if lastErr == nil {
				break
			} else {
				lastErr = d.exitErr(dir, pid, fmt.Errorf("qemu: qmp: %w", lastErr))
				d.kill(pid, dir)
			}
		}
		d.killPasst(dir)
		if !strings.Contains(lastErr.Error(), "host forwarding") {
			return vmm.Handle{}, lastErr
		}
	}
	if lastErr != nil {
		return vmm.Handle{}, lastErr
	}
	_ = os.Remove(m.Identity)
	rec.Handle.PID = pid
	rec.Handle.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(m.HostPort))
	rec.Handle.Meta = map[string]string{"qmp": m.QMPSocket, "accel": m.Accel, "memory": memMode(rec), "net": netMode(m)}
	if m.Disk != "" {
		rec.Handle.Meta["disk"] = m.Disk
	}
	defer q.Close()
	if incoming != "" {
		// The stream's RAM blocks were skipped (x-ignore-shared) exactly
		// when the checkpoint carries a memory file; the capability must
		// match on both sides.
		caps := []map[string]any{{"capability": "x-ignore-shared", "state": rec.MemPath != ""}}
		if err := q.Execute(ctx, "migrate-set-capabilities", map[string]any{"capabilities": caps}, nil); err != nil {
			return vmm.Handle{}, d.exitErr(dir, pid, err)
		}
		uri := "exec:cat " + shellQuote(filepath.Join(incoming, "state"))
		if err := q.Execute(ctx, "migrate-incoming", map[string]any{"uri": uri}, nil); err != nil {
			return vmm.Handle{}, d.exitErr(dir, pid, err)
		}
		st, err := waitIncoming(ctx, q)
		if err != nil {
			return vmm.Handle{}, d.exitErr(dir, pid, err)
		}
		if !rec.Handle.Paused && !st.Running {
			if err := q.Execute(ctx, "cont", nil, nil); err != nil {
				return vmm.Handle{}, d.exitErr(dir, pid, err)
			}
		}
	}
	if !rec.Handle.Paused {
		if err := d.waitAgent(ctx, rec.Handle.Addr, pid, m.QMPSocket); err != nil {
			return vmm.Handle{}, d.exitErr(dir, pid, err)
		}
	}
	rec.Machine.HostPort = m.HostPort
	if err := uds.WriteJSON(filepath.Join(dir, "vm.json"), rec); err != nil {
		return vmm.Handle{}, err
	}
	return rec.Handle, nil
}

func netMode(m Machine) string {
	switch {
	case m.NetFD:
		return "passt"
	case m.Restrict:
		return "slirp-restricted"
	default:
		return "slirp"
	}
}

func writeFile0600(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func memMode(rec *record) string {
	switch {
	case rec.MemPath == "":
		return "anonymous"
	case rec.MemShared:
		return "shared-file"
	default:
		return "cow-file"
	}
}

// spawn starts QEMU in its own process group (with netEnd, if any, as its
// fd 3) and waits until its QMP socket exists (or it exits).
func (d *Driver) spawn(ctx context.Context, dir string, m Machine, netEnd *os.File) (int, error) {
	_ = os.Remove(m.QMPSocket)
	logf, err := os.OpenFile(filepath.Join(dir, "qemu.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	logStart, _ := logf.Seek(0, io.SeekEnd)
	cmd := exec.Command(d.o.Binary, m.Args()...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if netEnd != nil {
		cmd.ExtraFiles = []*os.File{netEnd}
	}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("qemu: start: %w", err)
	}
	pid := cmd.Process.Pid
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }() // reap
	if err := os.WriteFile(filepath.Join(dir, "qemu.pid"), []byte(strconv.Itoa(pid)), 0o600); err != nil {
		_ = cmd.Process.Kill()
		return 0, err
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(m.QMPSocket); err == nil {
			return pid, nil
		}
		select {
		case <-exited:
			return 0, fmt.Errorf("%w: %s", vmm.ErrVMMExited, logTail(filepath.Join(dir, "qemu.log"), logStart))
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			return 0, fmt.Errorf("qemu: waiting for qmp socket: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// dialQMPWhileAlive connects to QEMU's QMP socket, retrying while the
// socket exists but is not yet listening (QEMU binds it before it listens)
// and the process is alive.
func dialQMPWhileAlive(ctx context.Context, sock string, pid int) (*QMP, error) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		q, err := DialQMP(ctx, sock)
		if err == nil || !errors.Is(err, syscall.ECONNREFUSED) || !pidAlive(pid, sock) {
			return q, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-tick.C:
		}
	}
}

func logTail(path string, from int64) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if from > 0 && from <= int64(len(b)) {
		b = b[from:]
	}
	if len(b) > 800 {
		b = b[len(b)-800:]
	}
	return strings.TrimSpace(string(b))
}

// exitErr decorates err with the QEMU log when the process has died.
func (d *Driver) exitErr(dir string, pid int, err error) error {
	if !pidAlive(pid, filepath.Join(dir, "qmp.sock")) {
		return fmt.Errorf("%w: %v: %s", vmm.ErrVMMExited, err, logTail(filepath.Join(dir, "qemu.log"), 0))
	}
	return err
}

// waitIncoming polls query-status until the incoming migration is over.
func waitIncoming(ctx context.Context, q *QMP) (Status, error) {
	for {
		st, err := q.QueryStatus(ctx)
		if err != nil {
			return Status{}, err
		}
		switch st.Status {
		case "inmigrate":
		case "paused", "running", "postmigrate", "prelaunch":
			return st, nil
		default:
			return st, fmt.Errorf("%w: incoming migration ended in state %q", vmm.ErrSnapshotInvalid, st.Status)
		}
		var mi MigrationInfo
		if err := q.Execute(ctx, "query-migrate", nil, &mi); err == nil && mi.Status == "failed" {
			return st, fmt.Errorf("%w: incoming migration failed: %s", vmm.ErrSnapshotInvalid, mi.ErrorDesc)
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return Status{}, fmt.Errorf("qemu: waiting for incoming migration: %w", err)
		}
	}
}

// waitAgent polls GET /health on addr until the agent answers (204), the
// process dies or ctx ends.
func (d *Driver) waitAgent(ctx context.Context, addr string, pid int, qmp string) error {
	c := &agentapi.Client{Addr: addr, HTTP: d.httpc}
	for {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := c.Health(rctx)
		cancel()
		if err == nil {
			return nil
		}
		if !pidAlive(pid, qmp) {
			return fmt.Errorf("%w: before the agent answered", vmm.ErrVMMExited)
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return fmt.Errorf("qemu: waiting for agent at %s: %w", addr, err)
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
