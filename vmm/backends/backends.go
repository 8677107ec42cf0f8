// Package backends maps a backend name to a vmm.Driver. It is the one place
// that knows every backend; commands call Open with the --vmm flag.
package backends

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/klog/v2"

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
	// Extra carries backend-specific settings (e.g. a kernel path).
	Extra map[string]string
	// Logger defaults to klog.Background().
	Logger klog.Logger
}

// Opener builds a driver from Options.
type Opener func(Options) (vmm.Driver, error)

var openers = map[string]Opener{
	// Extra keys: binary, config (--qemu-config JSON file), accel (auto|kvm|tcg).
	qemu.Backend: openQEMU,
	sim.Name: func(o Options) (vmm.Driver, error) {
		return sim.New(sim.Options{Root: o.RootDir, AgentCommand: o.AgentCommand, BootTimeout: o.BootTimeout, Logger: o.Logger})
	},
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
	qo := qemu.Options{Root: o.RootDir, Binary: o.Extra["binary"], Accel: o.Extra["accel"], BootTimeout: o.BootTimeout}
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
