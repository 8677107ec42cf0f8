package uds

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

var idRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// ValidID reports whether id is usable as a VM directory name.
func ValidID(id string) error {
	if !idRE.MatchString(id) || strings.Contains(id, "..") {
		return fmt.Errorf("invalid vm id %q (want [A-Za-z0-9][A-Za-z0-9_.-]{0,63})", id)
	}
	return nil
}

// MaxSocketPath is the longest unix socket path Linux accepts (sun_path
// minus the terminating NUL).
const MaxSocketPath = 107

// CheckSocketPath fails when p is too long to bind.
func CheckSocketPath(p string) error {
	if len(p) > MaxSocketPath {
		return fmt.Errorf("socket path %q is %d bytes, longer than %d: use a shorter root dir", p, len(p), MaxSocketPath)
	}
	return nil
}

// TapName derives a stable tap device name (<= 15 bytes, IFNAMSIZ-1) for id.
func TapName(prefix, id string) string {
	s := sha256.Sum256([]byte(id))
	n := prefix + hex.EncodeToString(s[:])
	return n[:15]
}

// MAC derives a stable locally administered unicast MAC for id.
func MAC(id string) string {
	s := sha256.Sum256([]byte("mac:" + id))
	return fmt.Sprintf("06:%02x:%02x:%02x:%02x:%02x", s[0], s[1], s[2], s[3], s[4])
}

// WriteJSON writes v to path atomically (temp file + rename).
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ReadJSON decodes path into v.
func ReadJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// LinkOrCopy hardlinks src to dst (checkpoint memory files are never written
// in place, so sharing the inode is safe and keeps clones' page cache
// shared), copying when the two are on different filesystems.
func LinkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// LogTail returns the last n bytes of the file at path (for error messages).
func LogTail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := fi.Size() - n
	if off < 0 {
		off = 0
	}
	b := make([]byte, fi.Size()-off)
	_, _ = f.ReadAt(b, off)
	return strings.TrimSpace(string(b))
}

// Within reports whether dir is a direct child of root (guards RemoveAll).
func Within(root, dir string) error {
	r, err1 := filepath.Abs(root)
	d, err2 := filepath.Abs(dir)
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	if filepath.Dir(d) != r {
		return fmt.Errorf("%s is not a vm directory under %s", dir, root)
	}
	return nil
}
