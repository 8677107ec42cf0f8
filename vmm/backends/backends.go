// Package backends maps a backend name to a vmm.Driver. It is the one place
// that knows every backend; commands call Open with the --vmm flag.
package backends

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/hearthvm/hearth/image"
	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/cloudhypervisor"
	"github.com/hearthvm/hearth/vmm/firecracker"
	"github.com/hearthvm/hearth/vmm/qemu"
	"github.com/hearthvm/hearth/vmm/sim"
)

// Options are what every backend may need. Backend-specific settings go in
// Extra, under keys the backend documents.
type Options struct {
	// RootDir is the directory the driver owns (VM run directories).
	RootDir string
	// AgentCommand is the in-guest agent command (sim runs it as the guest;
	// other backends may bake it into their guest image).
	AgentCommand []string
	// BootTimeout bounds a boot or clone until the agent answers; 0 = backend default.
	BootTimeout time.Duration
	// DiskBytes is every VM's disk, its writable root file system
	// (--disk-size; 0 = vmm.DefaultDiskBytes): sim's per-VM ext4 image,
	// and the ext4 root disk qemu builds from a template (image_cache).
	// A qemu "disk" given by the operator keeps its own size;
	// firecracker and cloud-hypervisor attach no writable disk (the
	// guest writes to its memory).
	DiskBytes int64
	// Extra carries backend-specific settings (e.g. a kernel path).
	Extra map[string]string
	// Logger defaults to klog.Background().
	Logger klog.Logger
}

// Opener builds a driver from Options.
type Opener func(Options) (vmm.Driver, error)

var openers = map[string]Opener{
	// Extra keys: binary, config (--qemu-config JSON file), accel (auto|kvm|tcg),
	// image_cache (each template's root disk is an ext4 image of its root
	// filesystem from package image, Options.DiskBytes large), disk (one base
	// root-disk image for every template, overriding image_cache and the
	// config's), egress_uid (the first of passt's uids, one per egress VM),
	// egress_uids (how many), egress_firewall (nft|off), dns (the egress
	// resolvers' upstream servers, comma-separated host[:port]).
	qemu.Backend: openQEMU,
	// Extra keys: image_cache (resolve templates through package image
	// with this cache directory; "default" is image.DefaultRoot()), rootfs
	// (one root filesystem directory for every template), uid_base (first
	// host uid of the guests' id range), cgroup_parent, lower_cache (the
	// id-shifted template copies, shareable by the drivers of one host),
	// uplink_netns and dns (sim.Options.UplinkNetns, .DNS: where the egress
	// lane's traffic and its resolvers' queries leave from).
	// Without image_cache and rootfs every template runs on the built-in
	// busybox root.
	sim.Name: openSim,
	// Extra keys: binary, kernel, initrd, rootfs, boot_args.
	firecracker.Name: func(o Options) (vmm.Driver, error) {
		return firecracker.New(firecracker.Options{
			RootDir: o.RootDir, Binary: o.Extra["binary"], Kernel: o.Extra["kernel"], Initrd: o.Extra["initrd"],
			Rootfs: o.Extra["rootfs"], BootArgs: o.Extra["boot_args"], StartTimeout: o.BootTimeout,
		})
	},
	// Extra keys: binary, kernel, initramfs, rootfs, cmdline, memory_restore_mode.
	cloudhypervisor.Name: func(o Options) (vmm.Driver, error) {
		return cloudhypervisor.New(cloudhypervisor.Options{
			RootDir: o.RootDir, Binary: o.Extra["binary"], Kernel: o.Extra["kernel"], Initramfs: o.Extra["initramfs"],
			Rootfs: o.Extra["rootfs"], Cmdline: o.Extra["cmdline"], MemoryRestoreMode: o.Extra["memory_restore_mode"],
			StartTimeout: o.BootTimeout,
		})
	},
}

// Names lists the known backends, sorted.
func Names() []string {
	out := make([]string, 0, len(openers))
	for n := range openers {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Open returns the driver named name ("sim", ...).
func Open(name string, opts Options) (vmm.Driver, error) {
	open, ok := openers[name]
	if !ok {
		return nil, fmt.Errorf("unknown vmm backend %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	return open(opts)
}

func openQEMU(o Options) (vmm.Driver, error) {
	qo := qemu.Options{Root: o.RootDir, Binary: o.Extra["binary"], Accel: o.Extra["accel"], BootTimeout: o.BootTimeout,
		EgressFirewall: o.Extra["egress_firewall"]}
	if store := imageStore(o); store != nil {
		qo.Disk = func(template string) (string, error) {
			ctx, cancel := context.WithTimeout(context.Background(), imageTimeout)
			defer cancel()
			r, err := store.Resolve(ctx, template)
			if err != nil {
				return "", err
			}
			return store.Ext4(ctx, r, diskBytes(o))
		}
	}
	if disk := o.Extra["disk"]; disk != "" {
		qo.Disk = func(string) (string, error) { return disk, nil }
	}
	if u := o.Extra["egress_uid"]; u != "" {
		uid, err := strconv.Atoi(u)
		if err != nil || uid <= 0 {
			return nil, fmt.Errorf("qemu: egress_uid %q: want a positive uid", u)
		}
		qo.EgressUID = uid
	}
	if u := o.Extra["egress_uids"]; u != "" {
		n, err := strconv.Atoi(u)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("qemu: egress_uids %q: want a positive count", u)
		}
		qo.EgressUIDs = n
	}
	if v := o.Extra["dns"]; v != "" {
		qo.DNS = strings.Split(v, ",")
	}
	if p := o.Extra["config"]; p != "" {
		c, err := qemu.LoadConfig(p)
		if err != nil {
			return nil, err
		}
		qo.Config = &c
	}
	logger := o.Logger
	if logger.GetSink() == nil {
		logger = klog.Background()
	}
	qo.Logf = func(format string, args ...any) { logger.Info(fmt.Sprintf(format, args...)) }
	return qemu.New(qo)
}

func openSim(o Options) (vmm.Driver, error) {
	so := sim.Options{Root: o.RootDir, AgentCommand: o.AgentCommand, BootTimeout: o.BootTimeout, Logger: o.Logger,
		CgroupParent: o.Extra["cgroup_parent"], DiskBytes: diskBytes(o)}
	if store := imageStore(o); store != nil {
		so.Rootfs = func(ctx context.Context, template string) (string, error) {
			r, err := store.Resolve(ctx, template)
			return r.Dir, err
		}
	}
	if dir := o.Extra["rootfs"]; dir != "" {
		so.Rootfs = func(context.Context, string) (string, error) { return dir, nil }
	}
	so.LowerCache = o.Extra["lower_cache"]
	so.UplinkNetns = o.Extra["uplink_netns"]
	if v := o.Extra["dns"]; v != "" {
		so.DNS = strings.Split(v, ",")
	}
	if v := o.Extra["uid_base"]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("sim: uid_base %q is not a positive integer", v)
		}
		so.UIDBase = n
	}
	return sim.New(so)
}

// diskBytes is o's disk size, vmm.DefaultDiskBytes by default.
func diskBytes(o Options) int64 {
	if o.DiskBytes > 0 {
		return o.DiskBytes
	}
	return vmm.DefaultDiskBytes
}

// imageTimeout bounds resolving a template (a first build of the built-in
// image takes minutes).
const imageTimeout = 15 * time.Minute

// imageStore is the image cache named by the image_cache key ("default" is
// image.DefaultRoot()), or nil without one. Its progress (a built-in image
// build) goes to stderr, so a long first build is never silent.
func imageStore(o Options) *image.Store {
	cache := o.Extra["image_cache"]
	if cache == "" {
		return nil
	}
	if cache == "default" {
		cache = image.DefaultRoot()
	}
	return &image.Store{Root: cache, Progress: os.Stderr}
}
