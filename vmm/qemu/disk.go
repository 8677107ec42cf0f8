package qemu

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// The root disk: a template's root filesystem as a read-only base image
// (raw ext4, from Options.Disk or the config's "disk"), never written. Each
// VM writes to its own qcow2 overlay in its run directory. A checkpoint
// carries the source's disk as one qcow2 overlay directly over the base
// (whatever chain the source had is flattened onto it), and a VM cloned
// from it gets a fresh overlay backed by that file, so clones share the base
// and the checkpoint's blocks and own only what they write. A checkpoint
// thus needs only the base image, never another checkpoint.

// newOverlay creates a qcow2 overlay at path over backing (format raw or
// qcow2).
func (d *Driver) newOverlay(ctx context.Context, path, backing, format string) error {
	cmd := exec.CommandContext(ctx, d.o.QemuImg, "create", "-q", "-f", "qcow2", "-F", format, "-b", backing, path)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("qemu: qemu-img create overlay over %s: %v: %s", backing, err, bytes.TrimSpace(out))
	}
	return nil
}

// baseDisk is the base image for template: Options.Disk, else the
// config's, else "" (no disk).
func (d *Driver) baseDisk(template string, g Guest) (string, error) {
	if d.o.Disk != nil {
		return d.o.Disk(template)
	}
	return g.Disk, nil
}

// flatten writes the data of the qcow2 chain at src that is not in base as
// a standalone qcow2 overlay dst over base. QEMU must not be writing src
// (after a completed migration it has released it).
func (d *Driver) flatten(ctx context.Context, src, dst, base, format string) error {
	cmd := exec.CommandContext(ctx, d.o.QemuImg, "convert", "-U", "-q", "-f", "qcow2", "-O", "qcow2",
		"-B", base, "-F", format, src, dst)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("qemu: qemu-img convert %s: %v: %s", src, err, bytes.TrimSpace(out))
	}
	return nil
}

// diskFormat is a base image's format, from its name.
func diskFormat(path string) string {
	if strings.HasSuffix(path, ".qcow2") {
		return "qcow2"
	}
	return "raw"
}
