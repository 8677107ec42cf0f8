package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/sim/seccomp"
)

// create makes the VM directory, fills its writable layer with populate,
// and starts the VM. On any error nothing is left behind: no process, no
// mount, no cgroup, no directory.
func (d *Driver) create(ctx context.Context, spec vmm.Spec, r record, populate func(dir string) error) (h vmm.Handle, err error) {
	if err := validID(spec.ID); err != nil {
		return vmm.Handle{}, err
	}
	if err := checkEnv(spec.Env); err != nil {
		return vmm.Handle{}, err
	}
	switch r.Net {
	case "", NetNone, NetEgress:
	default:
		return vmm.Handle{}, fmt.Errorf("sim: unknown net lane %q", r.Net)
	}
	dir := filepath.Join(d.root, spec.ID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return vmm.Handle{}, fmt.Errorf("sim: vm %s: %w", spec.ID, ErrAlreadyExists)
		}
		return vmm.Handle{}, fmt.Errorf("sim: %w", err)
	}
	r.Cgroup = d.cgroupOf(record{ID: spec.ID}).rel
	r.UIDBase = d.uidBase
	r.Hold = spec.Hold
	defer func() {
		if err != nil {
			_ = d.teardown(dir, r)
			_ = os.RemoveAll(dir)
		}
	}()
	if err := populate(dir); err != nil {
		return vmm.Handle{}, err
	}
	token := spec.Token
	if token == "" {
		token = randHex(16)
	}
	if err := os.WriteFile(filepath.Join(dir, tokenFile), []byte(token), 0o600); err != nil {
		return vmm.Handle{}, err
	}
	if err := writeRecord(dir, r); err != nil {
		return vmm.Handle{}, err
	}
	if err := d.start(ctx, dir, &r, true); err != nil {
		return vmm.Handle{}, err
	}
	return d.handle(dir, r), nil
}

func checkEnv(env map[string]string) error {
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return fmt.Errorf("sim: environment entry %q is not a NAME=value a process can hold (a name is non-empty without '=' or NUL, a value without NUL)", k)
		}
	}
	return nil
}

// start boots the VM in dir: cgroup, overlay, netns, init, network, agent.
// It records r.PID and r.Cgroup as soon as the init runs (before anything
// else can fail), then waits for the agent's /health through a new
// forwarder and sets r.Addr. On error the VM's processes are killed.
// fresh says dir and its disk image were just made (create), not left by
// an earlier run (restore).
func (d *Driver) start(ctx context.Context, dir string, r *record, fresh bool) (err error) {
	agentLayer, agentPath, err := d.agentLayer()
	if err != nil {
		return err
	}
	cpus, mem := nominal(r.Size)
	cg := d.cgroupOf(*r)
	r.Cgroup = cg.rel
	if err := cg.create(cpus, mem, pidsMax); err != nil {
		return err
	}
	tmplDir, err := d.rootfs(ctx, r.Template)
	if err != nil {
		return fmt.Errorf("sim: template %q: %w: %v", r.Template, errNoRootfs, err)
	}
	if r.Lower, err = d.shiftedLower(tmplDir); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, rootfsDir), 0o755); err != nil {
		return err
	}
	// The overlay's root takes the upper dir's owner: the guest's root.
	if err := mountDisk(dir, d.uidBase, fresh); err != nil {
		return err
	}
	if err := mountOverlay(dir, agentLayer, r.Lower); err != nil {
		return err
	}
	tok, err := os.ReadFile(filepath.Join(dir, tokenFile))
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(dir, logFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer cfgW.Close()
	// life: the init holds the write end for as long as it lives;
	// slirp4netns gets the read end as its --exit-fd and ends with the VM.
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer lifeR.Close()
	cmd := &exec.Cmd{
		Path: "/proc/self/exe",
		// The VM id only: the guest sees this command line as its pid 1's.
		Args:       []string{initArg0, r.ID},
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Dir:        "/",
		Stdout:     logf,
		Stderr:     logf,
		ExtraFiles: []*os.File{cfgR, lifeW},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC,
			Setsid:     true,
			// No parent-death signal: VMs outlive a node crash and are
			// re-adopted (or destroyed) by the restarted node.
		},
	}
	err = inNewNetns(cmd.Start)
	cfgR.Close()
	lifeW.Close()
	if err != nil {
		return fmt.Errorf("sim: starting init: %w", err)
	}
	pid := cmd.Process.Pid
	done := make(chan struct{})
	d.mu.Lock()
	d.children[pid] = done
	d.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		d.mu.Lock()
		delete(d.children, pid)
		d.mu.Unlock()
		close(done)
	}()
	defer func() {
		if err != nil {
			_ = cg.kill()
		}
	}()
	if err := cg.add(pid); err != nil {
		_ = cmd.Process.Kill()
		return err
	}
	r.PID, r.Addr, r.StartedAt = pid, "", time.Now().UTC()
	if err := writeRecord(dir, *r); err != nil {
		return err
	}
	nsfd, err := openNetns(pid)
	if err != nil {
		return err
	}
	fwd, err := newForwarder(nsfd, agentapi.Port, "")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			fwd.close()
		}
	}()
	if r.Net == NetEgress {
		if err := blockRoutes(nsfd); err != nil {
			return err
		}
		sctx, cancel := context.WithTimeout(ctx, d.bootTimeout)
		slirp, err := startSlirp(sctx, pid, d.uplink, logf, lifeR)
		cancel()
		if err != nil {
			return err
		}
		if err := cg.add(slirp.Process.Pid); err != nil {
			_ = slirp.Process.Kill()
			return err
		}
		go func() { _ = slirp.Wait() }()
		if err := d.startEgress(r.ID, nsfd, r.Egress, true); err != nil {
			return err
		}
	}
	if err := json.NewEncoder(cfgW).Encode(d.initConfig(dir, *r, agentPath, strings.TrimSpace(string(tok)))); err != nil {
		return fmt.Errorf("%w: init for %s: %v: %s", vmm.ErrVMMExited, r.ID, err, logTail(dir))
	}
	cfgW.Close()
	if err := d.waitReady(ctx, dir, fwd.addr(), done); err != nil {
		return err
	}
	if err := checkConfined(cg, pid); err != nil {
		return fmt.Errorf("sim: %s: %w", r.ID, err)
	}
	d.setForwarder(r.ID, fwd)
	r.Addr = fwd.addr()
	return writeRecord(dir, *r)
}

// agentReservedThreads is the agent's --reserve-threads: the OS threads
// it starts before it serves, so that a guest that fills the VM's
// pids.max (a fork storm) does not kill it at its next thread start.
const agentReservedThreads = 32

func (d *Driver) initConfig(dir string, r record, agentPath, token string) initConfig {
	args := append(append([]string(nil), d.agent[1:]...),
		"--listen", fmt.Sprintf("0.0.0.0:%d", agentapi.Port),
		"--root", guestHome,
		"--token-file", guestTokenFile,
		// The guest's processes share the VM's pids.max with the agent.
		"--reserve-threads", strconv.Itoa(agentReservedThreads),
	)
	if u := defaultUser(r.Lower); u != "" {
		args = append(args, "--user", u)
	}
	if r.Hold {
		// Until the node opens it (vmm.Spec.Hold), at every start.
		args = append(args, "--hold")
	}
	if len(r.Env) > 0 {
		// The environment travels, like the token, in the config the
		// init reads from its pipe, which writes it to guestEnvFile as a
		// JSON object: any value arrives as it was given, and none shows
		// on a command line.
		args = append(args, "--env-file", guestEnvFile)
	}
	resolv := ""
	if r.Net == NetEgress {
		resolv = path.Join(path.Dir(agentPath), "resolv.conf")
	}
	return initConfig{
		ResolvConf: resolv,
		Rootfs:     filepath.Join(dir, rootfsDir),
		Agent:      agentPath,
		AgentArgs:  args,
		Env: []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"HOME=" + guestHome,
			"TMPDIR=/tmp",
			"LANG=C.UTF-8",
			"HEARTH_SANDBOX_ID=" + r.ID,
			seccomp.EnvVar + "=1",
		},
		Token:    token,
		AgentEnv: r.Env,
		Hostname: "sandbox",
		UIDBase:  d.uidBase,
		UIDSize:  UIDRange,
		// Every start of the init is a new boot (Boot, Clone, a Restore
		// that starts the VM again); Pause/Resume and a Restore that
		// re-attaches keep the running one's.
		BootID: uuid.NewString(),
	}
}

func (d *Driver) setForwarder(id string, f *forwarder) {
	d.mu.Lock()
	old := d.fwd[id]
	d.fwd[id] = f
	d.mu.Unlock()
	if old != nil && old != f {
		old.close()
	}
}

func (d *Driver) dropForwarder(id string) {
	d.mu.Lock()
	f := d.fwd[id]
	delete(d.fwd, id)
	d.mu.Unlock()
	if f != nil {
		f.close()
	}
}

// waitReady polls the agent's /health at addr until it answers, the init
// exits (exited closes), or the boot deadline passes.
func (d *Driver) waitReady(ctx context.Context, dir, addr string, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, d.bootTimeout)
	defer cancel()
	delay := time.Millisecond
	for {
		if d.healthy(ctx, addr) {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%w: %s exited during start: %s", vmm.ErrVMMExited, filepath.Base(dir), logTail(dir))
		case <-ctx.Done():
			return fmt.Errorf("sim: agent for %s not healthy: %w (log: %s)", filepath.Base(dir), ctx.Err(), logTail(dir))
		case <-time.After(delay):
		}
		if delay < 25*time.Millisecond {
			delay += delay/2 + 1
		}
	}
}

// healthy reports whether the agent at addr answers its health probe
// (agentapi.Client.Health: 2xx).
func (d *Driver) healthy(ctx context.Context, addr string) bool {
	return (&agentapi.Client{Addr: addr, HTTP: d.hc}).Health(ctx) == nil
}

func logTail(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, logFile))
	if len(b) > 512 {
		b = b[len(b)-512:]
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "(empty)"
	}
	return s
}
