package qemu

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hearthvm/hearth/pool"
)

// Guest is a bootable guest: kernel, initramfs, base kernel command line
// and, optionally, the template's root disk (a read-only base image, raw
// ext4, that each VM overlays copy-on-write; Options.Disk overrides it).
type Guest struct {
	Kernel  string `json:"kernel"`
	Initrd  string `json:"initrd"`
	Cmdline string `json:"cmdline,omitempty"`
	Disk    string `json:"disk,omitempty"`
}

// Size is the machine shape of a size class.
type Size = pool.Shape

// Config maps templates (image references) to guests and size classes to
// machine shapes. It is the node's --qemu-config file (JSON):
//
//	{"templates": {"*": {"kernel": "vmlinuz", "initrd": "initrd.cpio.gz", "disk": "busybox.ext4"}},
//	 "sizes": {"small": {"vcpus": 1, "memory_mib": 256}}}
//
// Template "*" matches every template without an entry of its own. Relative
// paths are resolved against the file's directory. Sizes left out keep
// their defaults.
type Config struct {
	Templates map[string]Guest `json:"templates"`
	Sizes     map[string]Size  `json:"sizes,omitempty"`
}

// DefaultCmdline is the base kernel command line of the built guest. The
// fixed early TSC frequency lets the Debian kernel boot under TCG, where
// microvm offers no timer to calibrate against.
const DefaultCmdline = "console=ttyS0 quiet panic=-1 tsc_early_khz=2000000 tsc=reliable no_timer_check"

// DefaultSizes are the machine shapes used when a config omits a size:
// the one table, pool.Shapes.
var DefaultSizes = pool.Shapes()

// DefaultConfig maps every template to the guest built by
// hack/setup.d/20-qemu-guest.sh into guestDir (vmlinuz, initrd.cpio.gz, and
// its busybox test disk busybox.ext4 when present).
func DefaultConfig(guestDir string) Config {
	g := Guest{
		Kernel:  filepath.Join(guestDir, "vmlinuz"),
		Initrd:  filepath.Join(guestDir, "initrd.cpio.gz"),
		Cmdline: DefaultCmdline,
	}
	if disk := filepath.Join(guestDir, "busybox.ext4"); fileExists(disk) {
		g.Disk = disk
	}
	return Config{Templates: map[string]Guest{"*": g}}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// DefaultGuestDir returns $HEARTH_QEMU_GUEST_DIR, else the first
// hack/guest/out holding a vmlinuz found walking up from the working
// directory, else "".
func DefaultGuestDir() string {
	if d := os.Getenv("HEARTH_QEMU_GUEST_DIR"); d != "" {
		return d
	}
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		c := filepath.Join(dir, "hack", "guest", "out")
		if _, err := os.Stat(filepath.Join(c, "vmlinuz")); err == nil {
			return c
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// LoadConfig reads a Config file (JSON) and resolves its relative paths.
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	c, err := ParseConfig(b)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	base, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return Config{}, err
	}
	for k, g := range c.Templates {
		if g.Kernel != "" && !filepath.IsAbs(g.Kernel) {
			g.Kernel = filepath.Join(base, g.Kernel)
		}
		if g.Initrd != "" && !filepath.IsAbs(g.Initrd) {
			g.Initrd = filepath.Join(base, g.Initrd)
		}
		if g.Disk != "" && !filepath.IsAbs(g.Disk) {
			g.Disk = filepath.Join(base, g.Disk)
		}
		c.Templates[k] = g
	}
	return c, nil
}

// ParseConfig decodes and validates a Config.
func ParseConfig(b []byte) (Config, error) {
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return Config{}, fmt.Errorf("qemu config: %w", err)
	}
	if len(c.Templates) == 0 {
		return Config{}, errors.New("qemu config: no templates")
	}
	for k, g := range c.Templates {
		if g.Kernel == "" || g.Initrd == "" {
			return Config{}, fmt.Errorf("qemu config: template %q: kernel and initrd are required", k)
		}
		if g.Cmdline == "" {
			g.Cmdline = DefaultCmdline
			c.Templates[k] = g
		}
	}
	for k, s := range c.Sizes {
		if s.VCPUs < 1 || s.MemoryMiB < 64 {
			return Config{}, fmt.Errorf("qemu config: size %q: want vcpus >= 1 and memory_mib >= 64", k)
		}
	}
	return c, nil
}

// Resolve returns the guest and machine shape for a template and size.
func (c Config) Resolve(template, size string) (Guest, Size, error) {
	g, ok := c.Templates[template]
	if !ok {
		g, ok = c.Templates["*"]
	}
	if !ok {
		return Guest{}, Size{}, fmt.Errorf("qemu: no guest configured for template %q", template)
	}
	s, ok := c.Sizes[size]
	if !ok {
		s, ok = DefaultSizes[size]
	}
	if !ok {
		return Guest{}, Size{}, fmt.Errorf("qemu: unknown size %q", size)
	}
	return g, s, nil
}
