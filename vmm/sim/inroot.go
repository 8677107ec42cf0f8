package sim

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Paths inside a guest's root. The guest's root owns every entry of its
// writable layer, which persists across restarts and is copied into
// clones, so any path below a VM's root may be a symlink (absolute,
// "../..", into /proc/self/root or /proc/1/root), a hard link or a file
// where a directory is expected. The host (the driver, and the init
// before pivot_root, still host root) resolves such a path only through
// openat2 below a descriptor of the root, following no symlink, magic link
// or "..", and acts on the descriptor it gets: a mount goes onto
// /proc/self/fd/N (as runc does), a file is created with O_EXCL|O_NOFOLLOW
// in a directory so opened, an owner is set with fchown.

// openBeneath opens name under dirfd following no symlink, magic link or
// "..", never leaving dirfd (RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|
// RESOLVE_NO_MAGICLINKS, plus extra resolve flags).
func openBeneath(dirfd int, name string, flags int, resolve uint64) (int, error) {
	return unix.Openat2(dirfd, name, &unix.OpenHow{
		Flags:   uint64(flags | unix.O_NOFOLLOW | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | resolve,
	})
}

// fdPath names descriptor fd for mount(2): the mount lands on what fd
// refers to, never on a path the kernel resolves again.
func fdPath(fd int) string { return fmt.Sprintf("/proc/self/fd/%d", fd) }

// mountDir returns an O_PATH descriptor of the real directory name directly
// under dirfd, on dirfd's mount, to mount onto. A guest-made entry there
// that is no directory (a symlink, a file, a hard link, a device) is
// removed (the entry only, never what it points at) and a fresh directory
// of mode made.
func mountDir(dirfd int, name string, mode uint32) (int, error) {
	for try := 0; try < 3; try++ {
		fd, err := openBeneath(dirfd, name, unix.O_PATH|unix.O_DIRECTORY, unix.RESOLVE_NO_XDEV)
		if err == nil {
			return fd, nil
		}
		switch {
		case errors.Is(err, unix.ENOENT):
		case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP):
			if err := unix.Unlinkat(dirfd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
				return -1, fmt.Errorf("removing the guest's %s: %w", name, err)
			}
		default:
			return -1, fmt.Errorf("%s: %w", name, err)
		}
		if err := unix.Mkdirat(dirfd, name, mode); err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, fmt.Errorf("%s: %w", name, err)
		}
	}
	return -1, fmt.Errorf("%s: not a directory", name)
}

// mountOn mounts source (fstype, flags, data as mount(2)) onto the
// directory name under dirfd (see mountDir).
func mountOn(dirfd int, name string, mode uint32, source, fstype string, flags uintptr, data string) error {
	fd, err := mountDir(dirfd, name, mode)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Mount(source, fdPath(fd), fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %s: %w", fstype, name, err)
	}
	return nil
}

// openMounted opens (O_PATH) what is now mounted at name under dirfd.
func openMounted(dirfd int, name string) (int, error) {
	return openBeneath(dirfd, name, unix.O_PATH|unix.O_DIRECTORY, 0)
}

// createIn creates the regular file name under dirfd (which must not exist:
// O_EXCL|O_NOFOLLOW) with mode, writes body and sets its owner to uid.
func createIn(dirfd int, name string, mode uint32, body []byte, uid int) error {
	fd, err := unix.Openat(dirfd, name, unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_WRONLY|unix.O_CLOEXEC, mode)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	defer unix.Close(fd)
	for len(body) > 0 {
		n, err := unix.Write(fd, body)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		body = body[n:]
	}
	if uid >= 0 {
		if err := unix.Fchown(fd, uid, uid); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}
