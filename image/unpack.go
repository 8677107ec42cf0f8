package image

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"
)

// ErrUnsafePath is matched (errors.Is) by the error of an image whose layers
// try to leave the root filesystem: a ".." component, or an entry (or
// hardlink target) reached through a symlink or a non-directory.
var ErrUnsafePath = errors.New("unsafe path in image layer")

// ErrSparseTooLarge is returned (wrapped) for a sparse file (GNU or PAX
// sparse format) larger than maxSparseSize. A few bytes of tar can declare
// a sparse file of exabytes; its holes are written as holes, but the tar
// reader still hands them over as zeros, so the size is bounded.
var ErrSparseTooLarge = errors.New("sparse file in image layer too large")

// maxSparseSize bounds the size of one sparse file (a variable: the fuzz
// test lowers it).
var maxSparseSize int64 = 1 << 30

const (
	whiteoutPrefix = ".wh."
	opaqueWhiteout = ".wh..wh..opq"
)

// applyLayers flattens layers, lowest first, into dir.
//
// It applies the layers itself instead of reading mutate.Extract's flattened
// stream: that stream runs top layer first, so children come before their
// parent directory's entry and hardlinks before their targets, and an entry
// under an upper layer's symlink could not be told from a symlink traversal.
// Applied in order, every layer is checked on its own terms: whiteouts
// (".wh.NAME") delete NAME from the layers below, an opaque whiteout
// (".wh..wh..opq") empties its directory of what the layers below put there,
// and no entry may pass through a symlink.
func applyLayers(ctx context.Context, dir string, layers []v1.Layer) error {
	u := newUnpacker(dir)
	for i, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
		err = u.layer(ctx, tar.NewReader(rc))
		rc.Close()
		if err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
	}
	return u.finish()
}

// unpackTar unpacks one tar stream (a single layer) into dir.
func unpackTar(ctx context.Context, dir string, r io.Reader) error {
	u := newUnpacker(dir)
	if err := u.layer(ctx, tar.NewReader(r)); err != nil {
		return err
	}
	return u.finish()
}

// unpacker writes tar entries under root, keeping modes, owners (when it
// may), symlinks, hardlinks and device nodes (skipped when it may not create
// them). Directory modes and times are set last, so read-only directories
// can still be filled.
type unpacker struct {
	root string
	dirs map[string]*tar.Header // "" is root
}

func newUnpacker(root string) *unpacker {
	return &unpacker{root: root, dirs: map[string]*tar.Header{}}
}

func (u *unpacker) layer(ctx context.Context, tr *tar.Reader) error {
	written := map[string]bool{} // paths this layer wrote, and their parents
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		name, err := cleanName(hdr.Name)
		if err != nil {
			return err
		}
		if name == "" {
			if hdr.Typeflag == tar.TypeDir {
				u.dirs[""] = hdr
			}
			continue
		}
		parent, base := path.Split(name)
		parent = strings.TrimSuffix(parent, "/")
		if strings.HasPrefix(base, whiteoutPrefix) {
			if err := u.whiteout(parent, base, written); err != nil {
				return err
			}
			continue
		}
		if err := u.parents(parent, true); err != nil {
			return err
		}
		for p := name; p != "." && p != ""; p = path.Dir(p) {
			written[p] = true
		}
		if err := u.entry(name, hdr, tr); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
}

func (u *unpacker) abs(name string) string { return filepath.Join(u.root, filepath.FromSlash(name)) }

// cleanName makes a tar entry name relative to the root ("" for the root
// itself), refusing any ".." component.
func cleanName(n string) (string, error) {
	for _, c := range strings.Split(n, "/") {
		if c == ".." {
			return "", fmt.Errorf("%w: %q", ErrUnsafePath, n)
		}
	}
	return strings.TrimPrefix(path.Clean("/"+n), "/"), nil
}

// whiteout applies a whiteout entry base in dir: the opaque marker empties
// dir of lower layers' entries, ".wh.NAME" deletes NAME. A whiteout under a
// directory the lower layers lack has nothing to delete.
func (u *unpacker) whiteout(dir, base string, written map[string]bool) error {
	if err := u.parents(dir, false); errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	if base == opaqueWhiteout {
		return u.opaque(dir, written)
	}
	target := base[len(whiteoutPrefix):]
	if target == "" || target == "." || target == ".." {
		return fmt.Errorf("%w: whiteout %q", ErrUnsafePath, path.Join(dir, base))
	}
	gone := path.Join(dir, target)
	if err := os.RemoveAll(u.abs(gone)); err != nil {
		return err
	}
	for d := range u.dirs {
		if d == gone || strings.HasPrefix(d, gone+"/") {
			delete(u.dirs, d)
		}
	}
	return nil
}

// parents makes sure every component of dir is a real directory under root,
// creating missing ones if create (else: an error matching os.ErrNotExist),
// and refuses symlinks and non-directories.
func (u *unpacker) parents(dir string, create bool) error {
	if dir == "" {
		return nil
	}
	p := ""
	for _, c := range strings.Split(dir, "/") {
		p = path.Join(p, c)
		fi, err := os.Lstat(u.abs(p))
		switch {
		case errors.Is(err, os.ErrNotExist) && !create:
			return err
		case errors.Is(err, os.ErrNotExist):
			if err := os.Mkdir(u.abs(p), 0o755); err != nil {
				return err
			}
		case err != nil:
			return err
		case fi.Mode()&os.ModeSymlink != 0:
			return fmt.Errorf("%w: %s passes through symlink %s", ErrUnsafePath, dir, p)
		case !fi.IsDir():
			return fmt.Errorf("%w: %s passes through non-directory %s", ErrUnsafePath, dir, p)
		}
	}
	return nil
}

// opaque removes what lower layers put in dir, keeping this layer's entries.
func (u *unpacker) opaque(dir string, written map[string]bool) error {
	ents, err := os.ReadDir(u.abs(dir))
	if err != nil {
		return err
	}
	for _, e := range ents {
		p := path.Join(dir, e.Name())
		if written[p] {
			continue
		}
		if err := os.RemoveAll(u.abs(p)); err != nil {
			return err
		}
		for d := range u.dirs {
			if d == p || strings.HasPrefix(d, p+"/") {
				delete(u.dirs, d)
			}
		}
	}
	return nil
}

func (u *unpacker) entry(name string, hdr *tar.Header, r io.Reader) error {
	full := u.abs(name)
	if fi, err := os.Lstat(full); err == nil {
		if fi.IsDir() && hdr.Typeflag == tar.TypeDir {
			u.dirs[name] = hdr
			return nil
		}
		if err := os.RemoveAll(full); err != nil {
			return err
		}
		delete(u.dirs, name)
	}
	mode := hdr.FileInfo().Mode()
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := os.Mkdir(full, 0o755); err != nil {
			return err
		}
		u.dirs[name] = hdr
		return nil
	case tar.TypeReg, tar.TypeRegA:
		sp := sparse(hdr)
		if sp && hdr.Size > maxSparseSize {
			return fmt.Errorf("%w: %d bytes (at most %d)", ErrSparseTooLarge, hdr.Size, maxSparseSize)
		}
		f, err := os.OpenFile(full, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return err
		}
		if sp {
			err = copySparse(f, r)
		} else {
			_, err = io.Copy(f, r)
		}
		if err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	case tar.TypeSymlink:
		if err := os.Symlink(hdr.Linkname, full); err != nil {
			return err
		}
	case tar.TypeLink:
		target, err := cleanName(hdr.Linkname)
		if err != nil || target == "" {
			return fmt.Errorf("%w: hardlink to %q", ErrUnsafePath, hdr.Linkname)
		}
		if err := u.parents(path.Dir(target), false); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if err := os.Link(u.abs(target), full); err != nil {
			return err
		}
		return nil // shares the target's inode: owner and mode are the target's
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		m := uint32(mode.Perm())
		switch hdr.Typeflag {
		case tar.TypeChar:
			m |= unix.S_IFCHR
		case tar.TypeBlock:
			m |= unix.S_IFBLK
		default:
			m |= unix.S_IFIFO
		}
		err := unix.Mknod(full, m, int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor))))
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return nil // unprivileged: device nodes are the backend's business
		}
		if err != nil {
			return err
		}
	default:
		return nil // pax globals and the like carry no file
	}
	u.meta(full, hdr, mode)
	return nil
}

// sparse reports a sparse file in the PAX format (a regular file whose
// GNU.sparse.* records the reader applied); old GNU sparse entries
// (TypeGNUSparse) are not regular files here and are skipped.
func sparse(hdr *tar.Header) bool {
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// copySparse copies r to f leaving runs of zeros as holes (seeking over
// them) and sets f's size to what r held.
func copySparse(f *os.File, r io.Reader) error {
	buf := make([]byte, 64<<10)
	var off int64
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if allZero(buf[:n]) {
				if _, serr := f.Seek(int64(n), io.SeekCurrent); serr != nil {
					return serr
				}
			} else if _, werr := f.Write(buf[:n]); werr != nil {
				return werr
			}
			off += int64(n)
		}
		if err == io.EOF {
			return f.Truncate(off)
		}
		if err != nil {
			return err
		}
	}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// meta sets owner, mode, xattrs and mtime. Owner and xattrs are best effort:
// an unprivileged unpack keeps the caller's ownership.
func (u *unpacker) meta(full string, hdr *tar.Header, mode os.FileMode) error {
	_ = os.Lchown(full, hdr.Uid, hdr.Gid)
	for k, v := range hdr.PAXRecords {
		if x, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
			_ = unix.Lsetxattr(full, x, []byte(v), 0)
		}
	}
	if mode&os.ModeSymlink == 0 {
		if err := os.Chmod(full, mode&(os.ModePerm|os.ModeSetuid|os.ModeSetgid|os.ModeSticky)); err != nil {
			return err
		}
	}
	ts := []unix.Timespec{unix.NsecToTimespec(hdr.ModTime.UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
	_ = unix.UtimesNanoAt(unix.AT_FDCWD, full, ts, unix.AT_SYMLINK_NOFOLLOW)
	return nil
}

// finish gives directories their modes, owners and times.
func (u *unpacker) finish() error {
	if _, ok := u.dirs[""]; !ok {
		if err := os.Chmod(u.root, 0o755); err != nil {
			return err
		}
	}
	for name, hdr := range u.dirs {
		if err := u.meta(u.abs(name), hdr, hdr.FileInfo().Mode()); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}
