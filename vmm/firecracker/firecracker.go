// Package firecracker is the vmm.Driver for Firecracker: one `firecracker
// --api-sock <dir>/api.sock` process per microVM, configured and driven over
// its REST API (src/firecracker/swagger/firecracker.yaml), the in-guest agent
// reached over hybrid vsock through a per-VM loopback relay (Handle.Addr).
//
// It owns <RootDir>/<vm id>/ (api.sock, vsock.sock, vmm.log, handle.json,
// restore/ and state/ snapshot files) and the processes it started there, and
// nothing else: which VM is warm or claimed is the node's business, and tap
// devices for the egress lane must be created by the host's network setup.
//
// Contract and limits (Firecracker's, documented where they bite):
//   - Boot passes the agent token to the guest as `hearth.token=` on the
//     kernel command line; the guest image's init hands it to the agent, which
//     listens on vsock port Options.AgentPort.
//   - Snapshot pauses (PATCH /vm), writes a Full snapshot (vmstate + mem) and
//     resumes if the VM was running. Disks are not captured: the rootfs is
//     attached read-only and shared by every VM.
//   - Clone loads the snapshot in a fresh process (PUT /snapshot/load, memory
//     File backend = MAP_PRIVATE of a hardlink of the checkpoint's mem file)
//     with vsock_override (a unique socket per clone) and, on the egress lane,
//     network_overrides (a new tap). The guest MAC cannot change on load, so
//     clones keep the checkpoint's MAC; vCPUs and memory are fixed by the
//     snapshot (a Spec with another size is ErrUnsupported). The guest still
//     holds the checkpoint's token, so the driver re-keys the agent
//     (uds.Rekey); an agent without that endpoint keeps the old token, and
//     the returned Handle.Token says which token works.
//   - Stop = pause + snapshot into state/ + kill; Restore re-adopts a live
//     process (PID + cmdline check) or loads state/.
package firecracker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/internal/restvm"
	"github.com/hearthvm/hearth/vmm/internal/uds"
)

// Name is the backend id.
const Name = "firecracker"

// Size is one size class's machine.
type Size = restvm.Size

// DefaultSizes maps the size classes to machine configs: the one table,
// pool.Shapes.
var DefaultSizes = restvm.DefaultSizes()

// DefaultBootArgs is the usual Firecracker guest command line.
const DefaultBootArgs = "console=ttyS0 reboot=k panic=1 pci=off"

// Options configure the driver.
type Options struct {
	// RootDir holds one directory per VM. Required.
	RootDir string
	// Binary is the firecracker executable; default "firecracker" on PATH.
	Binary string
	// Args are extra arguments after --api-sock (e.g. --level Warning).
	Args []string
	// Env is extra environment for the VMM process.
	Env []string
	// Kernel is the uncompressed guest kernel (vmlinux). Required.
	Kernel string
	// Initrd is an optional initramfs.
	Initrd string
	// Rootfs is an optional root disk, attached read-only to every VM.
	Rootfs string
	// BootArgs is the kernel command line; default DefaultBootArgs.
	BootArgs string
	// Sizes overrides DefaultSizes.
	Sizes map[string]Size
	// GuestCID is the vsock CID (hybrid vsock: any VM may reuse it); default 3.
	GuestCID uint32
	// AgentPort is the guest vsock port of the agent; default agentapi.Port
	// (49983).
	AgentPort uint32
	// TapName names the egress tap for a VM id; default uds.TapName("fc", id).
	TapName func(id string) string
	// StartTimeout bounds spawn → agent answering; default 30s.
	StartTimeout time.Duration
}

// Driver is the Firecracker vmm.Driver; the lifecycle lives in restvm.Base,
// the Firecracker API calls in api.
type Driver struct {
	*restvm.Base
	o Options
}

var _ vmm.Driver = (*Driver)(nil)

// New validates o and returns a driver.
func New(o Options) (*Driver, error) {
	if o.BootArgs == "" {
		o.BootArgs = DefaultBootArgs
	}
	if o.Sizes == nil {
		o.Sizes = DefaultSizes
	}
	d := &Driver{}
	b, err := restvm.New(restvm.Config{
		Name: Name, DefaultBinary: "firecracker", TapPrefix: "fc",
		RootDir: o.RootDir, Binary: o.Binary, Args: o.Args, Env: o.Env, Kernel: o.Kernel, Sizes: o.Sizes,
		GuestCID: o.GuestCID, AgentPort: o.AgentPort, TapName: o.TapName, StartTimeout: o.StartTimeout,
		StateFile: "vmstate",
		SizeFixed: "machine config is fixed on load: ", NetFixed: "NICs are fixed on load: ",
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

// paths of one VM directory.
type paths = restvm.Paths

func vmPaths(dir string) paths { return restvm.NewPaths(dir) }

// Call is one API request.
type Call struct {
	Method, Path string
	Body         any
}

// BootCalls is the exact request sequence that configures and starts a
// cold-booted VM (pure; table-tested).
func BootCalls(o Options, spec vmm.Spec, sz Size, p paths) []Call {
	args := o.BootArgs + " hearth.id=" + spec.ID
	if spec.Token != "" {
		args += " hearth.token=" + spec.Token
	}
	calls := []Call{
		{"PUT", "/machine-config", MachineConfig{VcpuCount: sz.VCPUs, MemSizeMib: sz.MemoryMiB}},
		{"PUT", "/boot-source", BootSource{KernelImagePath: o.Kernel, BootArgs: args, InitrdPath: o.Initrd}},
	}
	if o.Rootfs != "" {
		calls = append(calls, Call{"PUT", "/drives/rootfs", Drive{DriveID: "rootfs", PathOnHost: o.Rootfs, IsRootDevice: true, IsReadOnly: true}})
	}
	if spec.Net == "egress" {
		calls = append(calls, Call{"PUT", "/network-interfaces/eth0", NetworkInterface{IfaceID: "eth0", HostDevName: o.TapName(spec.ID), GuestMAC: uds.MAC(spec.ID)}})
	}
	calls = append(calls,
		Call{"PUT", "/vsock", Vsock{GuestCID: o.GuestCID, UDSPath: p.Vsock}},
		Call{"PUT", "/actions", InstanceAction{ActionType: "InstanceStart"}},
	)
	return calls
}

// LoadCall is the PUT /snapshot/load that starts a VM from snapshot files.
func LoadCall(o Options, id, net, vmstate, mem string, p paths, resume bool) Call {
	body := SnapshotLoad{
		SnapshotPath:  vmstate,
		MemBackend:    &MemoryBackend{BackendType: "File", BackendPath: mem},
		ResumeVM:      resume,
		VsockOverride: &VsockOverride{UDSPath: p.Vsock},
	}
	if net == "egress" {
		body.NetworkOverrides = []NetworkOverride{{IfaceID: "eth0", HostDevName: o.TapName(id)}}
	}
	return Call{"PUT", "/snapshot/load", body}
}

func do(ctx context.Context, c *uds.Client, calls ...Call) error {
	for _, call := range calls {
		if err := c.Do(ctx, call.Method, call.Path, call.Body, nil); err != nil {
			return err
		}
	}
	return nil
}

// Manifest describes a checkpoint directory.
type Manifest = restvm.Manifest

// ReadManifest reads and preflights a checkpoint directory.
func ReadManifest(dir string) (Manifest, error) {
	m, err := restvm.ReadManifest(dir, Name)
	if err != nil {
		return m, err
	}
	if _, err := os.Stat(filepath.Join(dir, "vmstate")); err != nil {
		return m, fmt.Errorf("%w: %v", vmm.ErrSnapshotInvalid, err)
	}
	fi, err := os.Stat(filepath.Join(dir, "mem"))
	if err != nil {
		return m, fmt.Errorf("%w: %v", vmm.ErrSnapshotInvalid, err)
	}
	if fi.Size() != int64(m.MemMiB)<<20 {
		return m, fmt.Errorf("%w: mem is %d bytes, want %d MiB", vmm.ErrSnapshotInvalid, fi.Size(), m.MemMiB)
	}
	return m, nil
}

// api is the Firecracker half of restvm.Backend.
type api struct{ o *Options }

func (a api) SpawnArgs(sock string) []string { return []string{"--api-sock", sock} }

func (a api) Ping(ctx context.Context, c *uds.Client) error {
	var info InstanceInfo
	return c.Do(ctx, "GET", "/", nil, &info)
}

func (a api) Boot(ctx context.Context, c *uds.Client, spec vmm.Spec, sz Size, p paths) error {
	if err := do(ctx, c, BootCalls(*a.o, spec, sz, p)...); err != nil {
		return fmt.Errorf("firecracker boot: %w", err)
	}
	return nil
}

// SetState relies on PATCH /vm being idempotent in Firecracker: Paused on a
// paused VM is a 204.
func (a api) SetState(ctx context.Context, c *uds.Client, paused bool) error {
	state := "Resumed"
	if paused {
		state = "Paused"
	}
	return c.Do(ctx, "PATCH", "/vm", VM{State: state}, nil)
}

// SnapshotTo pauses if needed, writes vmstate+mem into dir, and restores the
// running state unless keepPaused.
func (a api) SnapshotTo(ctx context.Context, c *uds.Client, dir string, keepPaused bool) error {
	var info InstanceInfo
	if err := c.Do(ctx, "GET", "/", nil, &info); err != nil {
		return err
	}
	running := info.State == StateRunning
	if running {
		if err := c.Do(ctx, "PATCH", "/vm", VM{State: "Paused"}, nil); err != nil {
			return err
		}
	}
	err := c.Do(ctx, "PUT", "/snapshot/create", SnapshotCreate{
		SnapshotType: "Full",
		SnapshotPath: filepath.Join(dir, "vmstate"),
		MemFilePath:  filepath.Join(dir, "mem"),
	}, nil)
	if running && !keepPaused {
		if rerr := c.Do(context.WithoutCancel(ctx), "PATCH", "/vm", VM{State: "Resumed"}, nil); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}

func (a api) ReadManifest(dir string) (Manifest, error) { return ReadManifest(dir) }

// Stage hardlinks (or copies) the checkpoint's vmstate and mem.
func (a api) Stage(ckpt string, spec vmm.Spec, p paths) error {
	if err := os.Mkdir(p.Restore, 0o700); err != nil {
		return err
	}
	for _, f := range []string{"vmstate", "mem"} {
		if err := uds.LinkOrCopy(filepath.Join(ckpt, f), filepath.Join(p.Restore, f)); err != nil {
			return err
		}
	}
	return nil
}

func (a api) Clone(ctx context.Context, c *uds.Client, spec vmm.Spec, p paths) error {
	load := LoadCall(*a.o, spec.ID, spec.Net, filepath.Join(p.Restore, "vmstate"), filepath.Join(p.Restore, "mem"), p, true)
	if err := do(ctx, c, load); err != nil {
		return fmt.Errorf("firecracker clone: %w", err)
	}
	return nil
}

func (a api) Load(ctx context.Context, c *uds.Client, h vmm.Handle, p paths) error {
	return do(ctx, c, LoadCall(*a.o, h.ID, h.Meta["net"], filepath.Join(p.State, "vmstate"), filepath.Join(p.State, "mem"), p, !h.Paused))
}

// Shutdown does nothing: Stop kills the process.
func (a api) Shutdown(context.Context, *uds.Client, *uds.Process, vmm.Handle, paths) {}
