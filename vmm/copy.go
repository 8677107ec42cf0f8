package vmm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// copyChunk is the unit CopySparse reads; zeroChunk the unit it leaves as a
// hole when it holds only zeros.
const (
	copyChunk = 1 << 20
	zeroChunk = 64 << 10
)

var zeros [zeroChunk]byte

// CopySparse copies the regular file src (a VM's disk image, a RAM file;
// never through a symlink) to dst (which must not exist), keeping its
// holes: it reads only src's data (SEEK_DATA/SEEK_HOLE) and leaves blocks
// of zeros as holes, so the copy takes what src holds, never its size, and
// has src's length. It writes at most limit bytes (negative: no bound):
// past that it stops, removes dst and fails with ErrSnapshotTooLarge. With
// durable, dst is fsynced. It returns the bytes written.
func CopySparse(ctx context.Context, src, dst string, limit int64, durable bool) (written int64, err error) {
	in, err := os.OpenFile(src, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return 0, err
	}
	if !st.Mode().IsRegular() {
		return 0, fmt.Errorf("%s is not a regular file", src)
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return 0, err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_ = os.Remove(dst)
		}
	}()
	size := st.Size()
	buf := make([]byte, copyChunk)
	for off := int64(0); off < size; {
		data, err := unix.Seek(int(in.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			return written, err
		}
		hole, err := unix.Seek(int(in.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			return written, err
		}
		for p := data; p < hole; {
			if err := ctx.Err(); err != nil {
				return written, err
			}
			n := int(min(int64(len(buf)), hole-p))
			if _, err := io.ReadFull(io.NewSectionReader(in, p, int64(n)), buf[:n]); err != nil {
				return written, err
			}
			for i := 0; i < n; i += zeroChunk {
				b := buf[i:min(i+zeroChunk, n)]
				if bytes.Equal(b, zeros[:len(b)]) {
					continue
				}
				if limit >= 0 && written+int64(len(b)) > limit {
					return written, fmt.Errorf("%w: the copy of %s passed %d bytes", ErrSnapshotTooLarge, filepath.Base(src), limit)
				}
				if _, err := out.WriteAt(b, p+int64(i)); err != nil {
					return written, err
				}
				written += int64(len(b))
			}
			p += int64(n)
		}
		off = hole
	}
	if err := out.Truncate(size); err != nil {
		return written, err
	}
	if durable {
		if err := out.Sync(); err != nil {
			return written, err
		}
	}
	return written, nil
}
