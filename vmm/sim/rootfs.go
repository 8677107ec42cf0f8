package sim

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Directories under the driver root that are not VMs (their names are not
// valid VM ids).
const (
	imagesDir = ".images" // the built-in busybox root filesystem
	lowerDir  = ".lower"  // id-shifted copies of template root filesystems
	agentsDir = ".agent"  // overlay layers carrying the agent executable
)

// isStatic reports whether the ELF executable at p has no interpreter
// (runs in a root filesystem without the host's libc).
func isStatic(p string) error {
	f, err := elf.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked; the sim backend runs it inside the template's root filesystem, so build it static (CGO_ENABLED=0 go build ./cmd/sandbox-agent)", p)
		}
	}
	return nil
}

// BusyboxRootfs builds (once) a minimal root filesystem in dir from the
// host's static busybox: every applet, /bin/bash running busybox sh, root and a
// `user` account (uid 1000, /home/user), resolv.conf naming slirp's DNS.
// It is the template root filesystem when Options.Rootfs is nil.
func BusyboxRootfs(dir string) (string, error) {
	if _, err := os.Stat(dir + ".complete"); err == nil {
		return dir, nil
	}
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return "", fmt.Errorf("sim: the built-in root filesystem needs a static busybox (busybox-static): %w", err)
	}
	if err := isStatic(bb); err != nil {
		return "", fmt.Errorf("sim: %w", err)
	}
	list, err := exec.Command(bb, "--list").Output()
	if err != nil {
		return "", fmt.Errorf("sim: busybox --list: %w", err)
	}
	tmp := dir + ".tmp-" + randHex(4)
	defer os.RemoveAll(tmp)
	for _, d := range []string{"bin", "usr/bin", "dev", "proc", "sys", "etc", "root", "home/user", "tmp", "var/tmp", "run"} {
		if err := os.MkdirAll(filepath.Join(tmp, d), 0o755); err != nil {
			return "", err
		}
	}
	_ = os.Chmod(filepath.Join(tmp, "root"), 0o700)
	_ = os.Chmod(filepath.Join(tmp, "tmp"), 0o1777)
	_ = os.Chmod(filepath.Join(tmp, "var/tmp"), 0o1777)
	if err := os.Chown(filepath.Join(tmp, "home/user"), 1000, 1000); err != nil {
		return "", err
	}
	if _, err := copyFile(bb, filepath.Join(tmp, "bin/busybox"), 0o755); err != nil {
		return "", err
	}
	for _, name := range strings.Fields(string(list)) {
		if name == "busybox" || strings.Contains(name, "/") {
			continue
		}
		_ = os.Symlink("busybox", filepath.Join(tmp, "bin", name))
	}
	_ = os.Symlink("/bin/busybox", filepath.Join(tmp, "usr/bin/env"))
	// busybox has no "bash" applet: /bin/bash is a wrapper (e2b's SDK runs
	// commands as /bin/bash -l -c ...).
	if err := os.WriteFile(filepath.Join(tmp, "bin/bash"), []byte("#!/bin/sh\nexec /bin/sh \"$@\"\n"), 0o755); err != nil {
		return "", err
	}
	files := map[string]string{
		"etc/passwd":      "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
		"etc/group":       "root:x:0:\nuser:x:1000:\nnogroup:x:65534:\n",
		"etc/hostname":    "sandbox\n",
		"etc/hosts":       "127.0.0.1 localhost\n::1 localhost\n",
		"etc/resolv.conf": "nameserver " + guestAddr + "\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(tmp, name), []byte(body), 0o644); err != nil {
			return "", err
		}
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return "", err
	}
	_ = os.RemoveAll(dir) // an incomplete earlier build
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(dir + ".complete"); serr == nil {
			return dir, nil // built concurrently
		}
		return "", err
	}
	if err := os.WriteFile(dir+".complete", nil, 0o644); err != nil {
		return "", err
	}
	return dir, nil
}

// shiftedLower returns (building once) a copy of the template root
// filesystem src whose every file is owned by uid+base / gid+base: the
// overlay's lower layer, so that the guest's ids (0..size) map onto it.
func (d *Driver) shiftedLower(src string) (string, error) {
	src, err := filepath.Abs(src)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%d", src, d.uidBase)))
	dst := filepath.Join(d.lowerCache, hex.EncodeToString(sum[:8]))
	d.lowerMu.Lock()
	defer d.lowerMu.Unlock()
	stamp := dst + ".source"
	if _, err := os.Stat(stamp); err == nil {
		return dst, nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return "", err
	}
	// Drivers sharing the cache build each copy once: the lock serialises
	// them, and the stamp is checked again under it.
	lock, err := os.OpenFile(dst+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return "", err
	}
	defer unix.Flock(int(lock.Fd()), unix.LOCK_UN) //nolint:errcheck
	if _, err := os.Stat(stamp); err == nil {
		return dst, nil
	}
	tmp := dst + ".tmp-" + randHex(4)
	defer os.RemoveAll(tmp)
	if _, _, err := copyTreeOwned(src, tmp, d.uidBase, true); err != nil {
		return "", fmt.Errorf("sim: preparing root filesystem %s: %w", src, err)
	}
	_ = os.RemoveAll(dst)
	if err := os.Rename(tmp, dst); err != nil {
		return "", err
	}
	// The stamp (naming the source) sits beside the copy, out of the guest's view.
	if err := os.WriteFile(stamp, []byte(src+"\n"), 0o600); err != nil {
		return "", err
	}
	return dst, nil
}

// mountOverlay mounts lowers (top first) and dir's upper (on its mounted
// disk) at dir/rootfs (host mount namespace). The kernel shows the layer
// options as given, in the guest's /proc/self/mountinfo too, so none may
// carry a host path: the lower layers (the agent layer under the driver's
// root, the template copy under LowerCache, anywhere on the host) are
// named by descriptor, /proc/self/fd/<n>; upper and work relative to dir,
// from a thread whose working directory is dir.
func mountOverlay(dir string, lowers ...string) error {
	target := filepath.Join(dir, rootfsDir)
	_ = unix.Unmount(target, unix.MNT_DETACH) // a stale mount of a previous run
	names := make([]string, len(lowers))
	for i, l := range lowers {
		fd, err := unix.Open(l, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("sim: overlay layer %s: %w", l, err)
		}
		defer unix.Close(fd)
		names[i] = fmt.Sprintf("/proc/self/fd/%d", fd)
	}
	// upper/ and work/ are on the VM's disk (checked real directories by
	// mountDisk; the disk's top level is never the guest's).
	base := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", strings.Join(names, ":"),
		path.Join(diskMount, upperDir), path.Join(diskMount, workDir))
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread's cwd is private
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			errc <- err
			return
		}
		if err := unix.Chdir(dir); err != nil {
			errc <- err
			return
		}
		err := unix.Mount("overlay", rootfsDir, "overlay", unix.MS_NODEV, base+",index=off,redirect_dir=off,metacopy=off")
		if err != nil {
			err = unix.Mount("overlay", rootfsDir, "overlay", unix.MS_NODEV, base)
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		return fmt.Errorf("sim: mounting overlay at %s: %w", target, err)
	}
	return nil
}

// agentLayer returns (building once per agent binary content) the overlay
// layer that carries the agent at /.hearth-agent/<name> (and the egress
// lane's resolv.conf, naming slirp's DNS): a copy owned by
// host root (unmapped in the guest: it can run it, not change it), so no
// host path of the binary shows in the guest and an upgraded binary gets a
// layer of its own while running VMs keep theirs.
func (d *Driver) agentLayer() (layer, guestPath string, err error) {
	src := d.agent[0]
	name := filepath.Base(src)
	st, err := os.Stat(src)
	if err != nil {
		return "", "", fmt.Errorf("sim: agent: %w", err)
	}
	key := fmt.Sprintf("%d/%d", st.Size(), st.ModTime().UnixNano())
	d.agentMu.Lock()
	defer d.agentMu.Unlock()
	if d.agentKey == key {
		return d.agentDir, path.Join(guestAgentDir, name), nil
	}
	if err := isStatic(src); err != nil {
		return "", "", fmt.Errorf("sim: agent: %w", err)
	}
	f, err := os.Open(src)
	if err != nil {
		return "", "", err
	}
	h := sha256.New()
	_, err = io.Copy(h, f)
	f.Close()
	if err != nil {
		return "", "", err
	}
	h.Write([]byte("\x00layer v3: agent, resolv.conf naming the node's resolver"))
	dst := filepath.Join(d.root, agentsDir, hex.EncodeToString(h.Sum(nil)[:8]))
	if _, err := os.Stat(filepath.Join(dst, guestAgentDir, name)); err != nil {
		tmp := dst + ".tmp-" + randHex(4)
		defer os.RemoveAll(tmp)
		bin := filepath.Join(tmp, guestAgentDir)
		if err := os.MkdirAll(bin, 0o755); err != nil {
			return "", "", err
		}
		if _, err := copyFile(src, filepath.Join(bin, name), 0o555); err != nil {
			return "", "", err
		}
		if err := os.WriteFile(filepath.Join(bin, "resolv.conf"), []byte("nameserver "+guestAddr+"\n"), 0o444); err != nil {
			return "", "", err
		}
		if err := os.Chmod(bin, 0o555); err != nil {
			return "", "", err
		}
		_ = os.RemoveAll(dst)
		if err := os.Rename(tmp, dst); err != nil {
			return "", "", err
		}
	}
	d.agentKey, d.agentDir = key, dst
	return dst, path.Join(guestAgentDir, name), nil
}

// unmountAll detaches target until it is no longer a mount point.
func unmountAll(target string) {
	for i := 0; i < 8; i++ {
		if err := unix.Unmount(target, unix.MNT_DETACH); err != nil {
			return
		}
	}
}

// copyTreeOwned copies src to dst (which must not exist) with ownership,
// modes, symlinks, overlay whiteouts (0/0 character devices) and overlay's
// opaque-directory xattr. With shift, ids are moved up by base (src holds
// guest ids); without, they are kept. Other device files, sockets and
// fifos are skipped.
func copyTreeOwned(src, dst string, base int, shift bool) (files int, n int64, err error) {
	err = filepath.WalkDir(src, func(path string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := os.Lstat(path)
		if err != nil {
			return err
		}
		st, _ := info.Sys().(*syscall.Stat_t)
		uid, gid := int(st.Uid), int(st.Gid)
		if shift {
			uid, gid = uid+base, gid+base
		}
		mode := info.Mode()
		switch {
		case mode.IsDir():
			if err := os.Mkdir(target, 0o700); err != nil {
				return err
			}
			if v, err := getxattr(path, "trusted.overlay.opaque"); err == nil {
				_ = unix.Setxattr(target, "trusted.overlay.opaque", v, 0)
			}
		case mode&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, target); err != nil {
				return err
			}
			return os.Lchown(target, uid, gid)
		case mode.IsRegular():
			c, err := copyFile(path, target, 0o600)
			files++
			n += c
			if err != nil {
				return err
			}
		case mode&fs.ModeCharDevice != 0 && st.Rdev == 0: // overlay whiteout
			if err := unix.Mknod(target, unix.S_IFCHR|0o000, 0); err != nil {
				return err
			}
		default:
			return nil
		}
		if err := os.Lchown(target, uid, gid); err != nil {
			return err
		}
		// chmod after chown: chown clears set-id bits.
		return os.Chmod(target, mode&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky))
	})
	return files, n, err
}

func getxattr(path, name string) ([]byte, error) {
	buf := make([]byte, 256)
	n, err := unix.Lgetxattr(path, name, buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

var errNoRootfs = errors.New("no root filesystem for template")

// defaultUser is the account the agent runs processes as when a request
// names none: the e2b base template's "user" when the template has it, else
// the agent's own (root in the VM). /etc/passwd is read with every path
// component resolved inside lower, so a link in the image cannot point the
// host at one of its own files.
func defaultUser(lower string) string {
	const name = "user"
	root, err := os.Open(lower)
	if err != nil {
		return ""
	}
	defer root.Close()
	fd, err := unix.Openat2(int(root.Fd()), "etc/passwd", &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return ""
	}
	f := os.NewFile(uintptr(fd), "etc/passwd")
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, name+":") {
			return name
		}
	}
	return ""
}
