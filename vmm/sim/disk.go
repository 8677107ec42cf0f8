package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hearthvm/hearth/vmm"
)

// The VM's disk (see doc.go, "Disk"): a sparse ext4 image of a fixed size,
// loop-mounted by the host at <dir>/upperfs and holding the overlay's
// upper/ (the guest's writable layer) and work/. The guest writes into
// that file system only, so it can fill its disk (ENOSPC in the guest),
// never the host's; and a checkpoint copies the image file, never walking
// the guest's files.

// Names in a VM directory and a checkpoint.
const (
	diskImage = "upper.img" // the VM's disk image (also in a checkpoint)
	diskMount = "upperfs"   // its mount point in the VM directory
	// upperDir and workDir live in the disk, beside each other.
	upperDir = "upper"
	workDir  = "work"
)

// Disk sizes.
const (
	// DefaultDiskBytes is a VM's disk when Options.DiskBytes is 0: e2b's
	// 10 GiB, for every size class. The image is sparse: a fresh one takes
	// about 4 MiB of the host's disk.
	DefaultDiskBytes = vmm.DefaultDiskBytes
	// MinDiskBytes is the smallest disk (ext4 and its journal need room).
	MinDiskBytes = vmm.MinDiskBytes
)

// errNoMkfs explains a missing mkfs.ext4.
var errNoMkfs = errors.New("the sim backend's sized disks need mkfs.ext4 (Debian: e2fsprogs)")

// makeDisk creates a sparse ext4 image of size bytes at path (which must not
// exist). No reserved blocks (the guest's root is not the host's root, so
// they would be lost to it), inode tables and journal left to be zeroed by
// need: a fresh image takes a few MiB of the host's disk.
func makeDisk(ctx context.Context, path string, size int64) error {
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		return fmt.Errorf("sim: %w: %v", errNoMkfs, err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, mkfs, "-q", "-F", "-b", "4096", "-m", "0", "-L", "hearth",
		"-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", path).CombinedOutput()
	if err != nil {
		return fmt.Errorf("sim: mkfs.ext4 %s: %v: %s", path, err, bytes.TrimSpace(out))
	}
	return nil
}

// attachLoop attaches image to a free loop device with LO_FLAGS_AUTOCLEAR
// (the kernel detaches it when its last user, the mount, is gone) and
// returns the device, open; the caller mounts it and closes the file.
func attachLoop(image *os.File) (*os.File, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sim: loop devices: %w", err)
	}
	defer ctl.Close()
	for try := 0; ; try++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("sim: no free loop device: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		lf, err := os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0)
		if errors.Is(err, os.ErrNotExist) { // no udev (a container): make the node
			if err = unix.Mknod(dev, unix.S_IFBLK|0o600, int(unix.Mkdev(7, uint32(n)))); err == nil || errors.Is(err, unix.EEXIST) {
				lf, err = os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("sim: %s: %w", dev, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(image.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], image.Name())
		err = unix.IoctlLoopConfigure(int(lf.Fd()), &cfg)
		if err == nil {
			return lf, nil
		}
		lf.Close()
		// Another process took the device between GET_FREE and CONFIGURE.
		if !errors.Is(err, unix.EBUSY) || try >= 16 {
			return nil, fmt.Errorf("sim: attaching %s to %s: %w", image.Name(), dev, err)
		}
	}
}

// mountDisk mounts dir's disk image at dir/upperfs (a stale mount of an
// earlier run is detached first) and makes sure the file system holds
// upper/ (owned by the guest's root, uid) and work/ (host root, 0700) as
// real directories. fresh says the image is a new file this boot made (in
// a new VM directory): no loop device can be backed by it, so the wait for
// an earlier mount's device to let go is skipped — that wait scans every
// loop device on the host (loopsOf), which with hundreds of VMs cost more
// CPU than the rest of the boot.
func mountDisk(dir string, uid int, fresh bool) error {
	target := filepath.Join(dir, diskMount)
	unmountAll(target)
	if err := os.MkdirAll(target, 0o700); err != nil {
		return err
	}
	img, err := os.OpenFile(filepath.Join(dir, diskImage), os.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sim: %w: %v", errNoDisk, err)
	}
	defer img.Close()
	if st, err := img.Stat(); err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("sim: %w: %s is not a regular file", errNoDisk, img.Name())
	}
	// Never a second file system on one image: an earlier mount (a VM
	// killed a moment ago, its mount namespace not yet freed) must have
	// let go of its loop device first.
	if !fresh {
		if err := poll(5*time.Second, func() bool { return len(loopsOf(img.Name())) == 0 }); err != nil {
			return fmt.Errorf("sim: %s is still attached to %s", img.Name(), strings.Join(loopsOf(img.Name()), ", "))
		}
	}
	lf, err := attachLoop(img)
	if err != nil {
		return err
	}
	// errors=remount-ro: a damaged image stops taking writes, the host
	// carries on. discard: what the guest deletes leaves the host's disk.
	// noinit_itable: no background zeroing of inode tables (the sparse
	// image reads zeros there already).
	err = unix.Mount(lf.Name(), target, "ext4", unix.MS_NODEV|unix.MS_NOSUID|unix.MS_NOATIME,
		"errors=remount-ro,discard,noinit_itable")
	lf.Close() // the mount holds the device; unmounting frees it (AUTOCLEAR)
	if err != nil {
		return fmt.Errorf("sim: mounting %s at %s: %w", img.Name(), target, err)
	}
	if err := prepareDisk(target, uid); err != nil {
		unmountAll(target)
		return err
	}
	return nil
}

// prepareDisk creates upper/ and work/ in the mounted disk at mnt and sets
// their owners. Both are resolved beneath mnt with no symlink followed: the
// disk's top level is never the guest's (its root is upper/), but the image
// may come from a checkpoint.
func prepareDisk(mnt string, uid int) error {
	root, err := os.Open(mnt)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, d := range []struct {
		name     string
		uid      int
		mode     uint32
		setMode  bool
		required bool
	}{{upperDir, uid, 0o755, false, true}, {workDir, 0, 0o700, true, true}} {
		if err := unix.Mkdirat(int(root.Fd()), d.name, d.mode); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("sim: %s/%s: %w", mnt, d.name, err)
		}
		fd, err := openBeneath(int(root.Fd()), d.name, unix.O_RDONLY|unix.O_DIRECTORY, unix.RESOLVE_NO_XDEV)
		if err != nil {
			return fmt.Errorf("sim: %s/%s is not a directory of the disk: %w", mnt, d.name, err)
		}
		err = unix.Fchown(fd, d.uid, d.uid)
		if err == nil && d.setMode {
			err = unix.Fchmod(fd, d.mode)
		}
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("sim: %s/%s: %w", mnt, d.name, err)
		}
	}
	return nil
}

var errNoDisk = errors.New("no disk image")

// loopsOf lists the loop devices backed by the file at path.
func loopsOf(path string) []string {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)") == path {
			out = append(out, filepath.Base(filepath.Dir(filepath.Dir(f))))
		}
	}
	return out
}

// unmountDisk detaches dir's disk mount (its loop device goes with its
// last user).
func unmountDisk(dir string) { unmountAll(filepath.Join(dir, diskMount)) }

// diskMounted reports whether dir's disk is mounted: upperfs is on another
// device than dir.
func diskMounted(dir string) bool {
	var a, b unix.Stat_t
	if unix.Lstat(dir, &a) != nil || unix.Lstat(filepath.Join(dir, diskMount), &b) != nil {
		return false
	}
	return a.Dev != b.Dev
}

// openDiskFS opens a directory on the file system of dir's disk: its
// mount at upperfs/, or, when the host has no such mount (sandboxd
// restarted in a new mount namespace, a container's, while the VM ran on),
// the root of the VM's init (pid, its owner checked by the caller), the
// overlay whose statfs and syncfs are its upper file system's. Nil
// without either.
func openDiskFS(dir string, pid int) (*os.File, error) {
	if diskMounted(dir) {
		return os.Open(filepath.Join(dir, diskMount))
	}
	if pid > 0 {
		// The init's root is the overlay it pivoted into; the guest
		// cannot change it, and nothing below it is resolved.
		return os.Open(fmt.Sprintf("/proc/%d/root", pid))
	}
	return nil, nil
}

// syncDisk flushes dir's disk (see openDiskFS; an unmounted, stopped
// disk is consistent already), so a copy of the image file holds
// everything the guest wrote. The guest must be frozen.
func syncDisk(dir string, pid int) error {
	f, err := openDiskFS(dir, pid)
	if err != nil || f == nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}

// diskUsage is statfs of dir's disk (see openDiskFS): its size and the
// bytes in use.
func diskUsage(dir string, pid int) (total, used int64, err error) {
	f, err := openDiskFS(dir, pid)
	if err != nil {
		return 0, 0, err
	}
	if f == nil {
		return 0, 0, fmt.Errorf("sim: %s: disk not mounted", filepath.Base(dir))
	}
	defer f.Close()
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return 0, 0, err
	}
	bs := int64(st.Bsize)
	return int64(st.Blocks) * bs, int64(st.Blocks-st.Bfree) * bs, nil
}

// mountsUnder lists the mount points at or below dir in this process's
// mount namespace, deepest first.
func mountsUnder(dir string) ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		if strings.HasSuffix(mp, "//deleted") {
			continue // its directory is gone: no path reaches it
		}
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	// Deepest first: longer paths are below shorter ones.
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && len(out[j]) > len(out[j-1]); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + byte(c-'0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountUnder detaches every mount at or below dir (deepest first) and
// fails naming what is still mounted there afterwards.
func unmountUnder(dir string) error {
	for try := 0; ; try++ {
		mps, err := mountsUnder(dir)
		if err != nil {
			return err
		}
		if len(mps) == 0 {
			return nil
		}
		if try == 3 {
			return fmt.Errorf("sim: still mounted under %s: %s", dir, strings.Join(mps, ", "))
		}
		for _, mp := range mps {
			_ = unix.Unmount(mp, unix.MNT_DETACH)
		}
	}
}
