// Package cloudhypervisor is the vmm.Driver for Cloud Hypervisor: one
// `cloud-hypervisor --api-socket path=<dir>/api.sock` process per microVM,
// created and driven over its REST API (/api/v1, cloud-hypervisor.yaml), the
// in-guest agent reached over hybrid vsock through a per-VM loopback relay
// (Handle.Addr).
//
// It owns <RootDir>/<vm id>/ (api.sock, vsock.sock, vmm.log, serial.log,
// handle.json, restore/ and state/ snapshot directories) and the processes it
// started there, nothing else.
//
// Contract and limits:
//   - Boot = vm.create (VmConfig) + vm.boot; the agent token reaches the guest
//     as `hearth.token=` on the kernel command line.
//   - Pause/Resume are made idempotent here: CH answers a same-state
//     transition with 500, so the driver reads vm.info first.
//   - Snapshot = vm.pause (if running) → vm.snapshot{destination_url:
//     file://<dir>/vm} → vm.resume. Disks are not captured (the rootfs is
//     attached read-only).
//   - Clone copies config.json (patched: vsock socket, tap, serial file) and
//     state.json, hardlinks the memory-range files, then vm.restore +
//     vm.resume in a fresh process. The guest MAC stays the checkpoint's
//     (changing it needs vm.remove-device + vm.add-net; not done). vCPUs and
//     memory are the checkpoint's. The agent is re-keyed as in firecracker.
//   - memory_restore_mode is sent only when Options.MemoryRestoreMode is set
//     ("CopyOnWrite" shares clean pages between clones on CH versions that
//     have it; the default Copy reads the whole memory in).
//   - Stop = pause + snapshot into state/ + vmm.shutdown; Restore re-adopts a
//     live process (PID + cmdline check) or restores state/.
package cloudhypervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/internal/restvm"
	"github.com/hearthvm/hearth/vmm/internal/uds"
)

// Name is the backend id.
const Name = "cloud-hypervisor"

// Size is one size class's machine.
type Size = restvm.Size

// DefaultSizes maps the size classes to VM shapes: the one table,
// pool.Shapes.
var DefaultSizes = restvm.DefaultSizes()

// DefaultCmdline is the guest kernel command line.
const DefaultCmdline = "console=ttyS0 reboot=k panic=1"

// Options configure the driver.
type Options struct {
	// RootDir holds one directory per VM. Required.
	RootDir string
	// Binary is the cloud-hypervisor executable; default on PATH.
	Binary string
	// Args are extra arguments after --api-socket.
	Args []string
	// Env is extra environment for the VMM process.
	Env []string
	// Kernel is the guest kernel (vmlinux / bzImage). Required.
	Kernel string
	// Initramfs is optional.
	Initramfs string
	// Rootfs is an optional disk attached read-only to every VM.
	Rootfs string
	// Cmdline is the kernel command line; default DefaultCmdline.
	Cmdline string
	// Sizes overrides DefaultSizes.
	Sizes map[string]Size
	// GuestCID is the vsock CID (hybrid vsock: reusable); default 3.
	GuestCID uint32
	// AgentPort is the guest vsock port of the agent; default agentapi.Port
	// (49983).
	AgentPort uint32
	// TapName names the egress tap for a VM id; default uds.TapName("ch", id).
	TapName func(id string) string
	// MemoryRestoreMode, when set, is sent as vm.restore memory_restore_mode.
	MemoryRestoreMode string
	// Prefault, when set, is sent as vm.restore prefault.
	Prefault *bool
	// StartTimeout bounds spawn → agent answering; default 30s.
	StartTimeout time.Duration
}

// Driver is the Cloud Hypervisor vmm.Driver; the lifecycle lives in
// restvm.Base, the Cloud Hypervisor API calls in api.
type Driver struct {
	*restvm.Base
	o Options
}

var _ vmm.Driver = (*Driver)(nil)

// New validates o and returns a driver.
func New(o Options) (*Driver, error) {
	if o.Cmdline == "" {
		o.Cmdline = DefaultCmdline
	}
	if o.Sizes == nil {
		o.Sizes = DefaultSizes
	}
	d := &Driver{}
	b, err := restvm.New(restvm.Config{
		Name: Name, DefaultBinary: "cloud-hypervisor", TapPrefix: "ch",
		RootDir: o.RootDir, Binary: o.Binary, Args: o.Args, Env: o.Env, Kernel: o.Kernel, Sizes: o.Sizes,
		GuestCID: o.GuestCID, AgentPort: o.AgentPort, TapName: o.TapName, StartTimeout: o.StartTimeout,
		StateFile: "config.json", SnapshotSubdir: "vm",
	}, api{&d.o})
	if err != nil {
		return nil, err
	}
	c := b.Config()
	o.RootDir, o.Binary, o.GuestCID, o.AgentPort, o.TapName, o.StartTimeout = c.RootDir, c.Binary, c.GuestCID, c.AgentPort, c.TapName, c.StartTimeout
	d.Base, d.o = b, o
	return d, nil
}

// Name implements vmm.Driver.
func (d *Driver) Name() string { return Name }

type paths = restvm.Paths

func vmPaths(dir string) paths { return restvm.NewPaths(dir) }

// CreateConfig is the vm.create body for a cold boot (pure; table-tested).
func CreateConfig(o Options, spec vmm.Spec, sz Size, p paths) VmConfig {
	cmdline := o.Cmdline + " hearth.id=" + spec.ID
	if spec.Token != "" {
		cmdline += " hearth.token=" + spec.Token
	}
	c := VmConfig{
		Cpus:    &CpusConfig{BootVcpus: sz.VCPUs, MaxVcpus: sz.VCPUs},
		Memory:  &MemoryConfig{Size: int64(sz.MemoryMiB) << 20},
		Payload: &PayloadConfig{Kernel: o.Kernel, Initramfs: o.Initramfs, Cmdline: cmdline},
		Rng:     &RngConfig{Src: "/dev/urandom"},
		Serial:  &ConsoleConfig{Mode: "File", File: p.Serial},
		Console: &ConsoleConfig{Mode: "Off"},
		Vsock:   &VsockConfig{CID: o.GuestCID, Socket: p.Vsock, ID: "vsock0"},
	}
	if o.Rootfs != "" {
		c.Disks = []DiskConfig{{Path: o.Rootfs, Readonly: true, ID: "rootfs"}}
	}
	if spec.Net == "egress" {
		c.Net = []NetConfig{{Tap: o.TapName(spec.ID), MAC: uds.MAC(spec.ID), ID: "net0"}}
	}
	return c
}

// PatchConfig rewrites a snapshot's config.json for a VM living in p: its
// vsock socket, serial file and (egress) tap. It edits the JSON generically so
// fields Hearth does not model survive.
func PatchConfig(raw []byte, p paths, tap string) ([]byte, error) {
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("%w: config.json: %v", vmm.ErrSnapshotInvalid, err)
	}
	if v, ok := cfg["vsock"].(map[string]any); ok {
		v["socket"] = p.Vsock
	}
	if s, ok := cfg["serial"].(map[string]any); ok && s["mode"] == "File" {
		s["file"] = p.Serial
	}
	if nets, ok := cfg["net"].([]any); ok && tap != "" {
		for _, n := range nets {
			if m, ok := n.(map[string]any); ok {
				m["tap"] = tap
			}
		}
	}
	return json.Marshal(cfg)
}

func info(ctx context.Context, c *uds.Client) (VmInfo, error) {
	var i VmInfo
	err := c.Do(ctx, "GET", API+"/vm.info", nil, &i)
	return i, err
}

// transition moves the VM to want (Paused or Running); a VM already there
// is success (CH itself answers 500 InvalidStateTransition).
func transition(ctx context.Context, c *uds.Client, want string) error {
	i, err := info(ctx, c)
	if err != nil {
		return err
	}
	if i.State == want {
		return nil
	}
	op := "/vm.pause"
	if want == StateRunning {
		op = "/vm.resume"
	}
	return c.Do(ctx, "PUT", API+op, nil, nil)
}

// Manifest describes a checkpoint directory (CH's own files live in vm/).
type Manifest = restvm.Manifest

// ReadManifest reads and preflights a checkpoint directory.
func ReadManifest(dir string) (Manifest, error) {
	m, err := restvm.ReadManifest(dir, Name)
	if err != nil {
		return m, err
	}
	for _, f := range []string{"config.json", "state.json"} {
		if _, err := os.Stat(filepath.Join(dir, "vm", f)); err != nil {
			return m, fmt.Errorf("%w: %v", vmm.ErrSnapshotInvalid, err)
		}
	}
	return m, nil
}

// stage lays out a snapshot from src (CH files) in dst for the VM in p:
// config.json patched, state.json copied, memory files hardlinked.
func stage(src, dst string, p paths, tap string) error {
	if err := os.Mkdir(dst, 0o700); err != nil {
		return err
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range ents {
		s, t := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		switch e.Name() {
		case "config.json":
			raw, err := os.ReadFile(s)
			if err != nil {
				return err
			}
			out, err := PatchConfig(raw, p, tap)
			if err != nil {
				return err
			}
			if err := os.WriteFile(t, out, 0o600); err != nil {
				return err
			}
		case "state.json":
			raw, err := os.ReadFile(s)
			if err != nil {
				return err
			}
			if err := os.WriteFile(t, raw, 0o600); err != nil {
				return err
			}
		default:
			if err := uds.LinkOrCopy(s, t); err != nil {
				return err
			}
		}
	}
	return nil
}

// api is the Cloud Hypervisor half of restvm.Backend.
type api struct{ o *Options }

func (a api) restoreCall(dir string) RestoreConfig {
	return RestoreConfig{SourceURL: "file://" + dir, Prefault: a.o.Prefault, MemoryRestoreMode: a.o.MemoryRestoreMode}
}

func (a api) SpawnArgs(sock string) []string { return []string{"--api-socket", "path=" + sock} }

func (a api) Ping(ctx context.Context, c *uds.Client) error {
	var ping VmmPingResponse
	return c.Do(ctx, "GET", API+"/vmm.ping", nil, &ping)
}

func (a api) Boot(ctx context.Context, c *uds.Client, spec vmm.Spec, sz Size, p paths) error {
	if err := c.Do(ctx, "PUT", API+"/vm.create", CreateConfig(*a.o, spec, sz, p), nil); err != nil {
		return fmt.Errorf("cloud-hypervisor create: %w", err)
	}
	if err := c.Do(ctx, "PUT", API+"/vm.boot", nil, nil); err != nil {
		return restvm.ExitErr(p, fmt.Errorf("cloud-hypervisor boot: %w", err))
	}
	return nil
}

func (a api) SetState(ctx context.Context, c *uds.Client, paused bool) error {
	if paused {
		return transition(ctx, c, StatePaused)
	}
	return transition(ctx, c, StateRunning)
}

// SnapshotTo writes CH's snapshot files into dir (which must exist).
func (a api) SnapshotTo(ctx context.Context, c *uds.Client, dir string, keepPaused bool) error {
	i, err := info(ctx, c)
	if err != nil {
		return err
	}
	running := i.State == StateRunning
	if running {
		if err := c.Do(ctx, "PUT", API+"/vm.pause", nil, nil); err != nil {
			return err
		}
	}
	err = c.Do(ctx, "PUT", API+"/vm.snapshot", VmSnapshotConfig{DestinationURL: "file://" + dir}, nil)
	if running && !keepPaused {
		if rerr := c.Do(context.WithoutCancel(ctx), "PUT", API+"/vm.resume", nil, nil); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}

func (a api) ReadManifest(dir string) (Manifest, error) { return ReadManifest(dir) }

func (a api) Stage(ckpt string, spec vmm.Spec, p paths) error {
	tap := ""
	if spec.Net == "egress" {
		tap = a.o.TapName(spec.ID)
	}
	return stage(ckpt, p.Restore, p, tap)
}

func (a api) Clone(ctx context.Context, c *uds.Client, spec vmm.Spec, p paths) error {
	if err := c.Do(ctx, "PUT", API+"/vm.restore", a.restoreCall(p.Restore), nil); err != nil {
		return restvm.ExitErr(p, fmt.Errorf("cloud-hypervisor clone: %w", err))
	}
	if err := c.Do(ctx, "PUT", API+"/vm.resume", nil, nil); err != nil {
		return fmt.Errorf("cloud-hypervisor clone: %w", err)
	}
	return nil
}

func (a api) Load(ctx context.Context, c *uds.Client, h vmm.Handle, p paths) error {
	err := c.Do(ctx, "PUT", API+"/vm.restore", a.restoreCall(p.State), nil)
	if err == nil && !h.Paused {
		err = c.Do(ctx, "PUT", API+"/vm.resume", nil, nil)
	}
	return err
}

// Shutdown is orderly: vmm.shutdown, then a short grace before Stop's SIGKILL.
func (a api) Shutdown(ctx context.Context, c *uds.Client, proc *uds.Process, h vmm.Handle, p paths) {
	_ = c.Do(ctx, "PUT", API+"/vmm.shutdown", nil, nil)
	gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_ = uds.Poll(gctx, func() error {
		if proc != nil && proc.Exited() || proc == nil && !uds.Alive(h.PID, p.API) {
			return nil
		}
		return errors.New("running")
	})
	cancel()
}
