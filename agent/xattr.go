package agent

import (
	"bytes"
	"errors"
	"net/http"
	"strings"

	"golang.org/x/sys/unix"
)

// User-defined file metadata (envd >= 0.6.2): POST /files carries it as
// X-Metadata-<key>: <value> headers; the agent stores each pair as the
// extended attribute user.e2b.<key> of every file the request writes, and
// a write replaces the file's metadata (a write without any removes what an
// earlier one stored, as envd does), and every entry it describes (Stat, ListDir, MakeDir, Move, watch events
// with includeEntry, the write's own answer) carries the file's
// user.e2b.* attributes, set by it or anyone else, as metadata. Keys are
// lower-cased (HTTP header names are not case-preserving).

const (
	metadataHeaderPrefix = "X-Metadata-"
	metadataXattrPrefix  = "user.e2b."
	// maxMetadataBytes bounds one request's metadata, keys and values.
	maxMetadataBytes = 64 << 10
)

// metadataFromHeaders extracts the X-Metadata-* headers; nil when none.
func metadataFromHeaders(h http.Header) (map[string]string, error) {
	var md map[string]string
	n := 0
	for k, vs := range h {
		key, ok := cutPrefixFold(k, metadataHeaderPrefix)
		if !ok || len(vs) == 0 {
			continue
		}
		if key == "" {
			return nil, errorf(codeInvalidArgument, "an X-Metadata- header has no key")
		}
		if md == nil {
			md = map[string]string{}
		}
		key = strings.ToLower(key)
		md[key] = vs[0]
		if n += len(key) + len(vs[0]); n > maxMetadataBytes {
			return nil, errorf(codeInvalidArgument, "file metadata exceeds %d bytes", maxMetadataBytes)
		}
	}
	return md, nil
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || !strings.EqualFold(s[:len(prefix)], prefix) {
		return "", false
	}
	return s[len(prefix):], true
}

// setMetadata makes md the metadata of the file at path: user.e2b.*
// attributes it does not name are removed, then md is stored. A file system
// without extended attributes fails only when md is not empty.
func setMetadata(path string, md map[string]string) error {
	for k := range readMetadata(path) {
		if _, keep := md[k]; keep {
			continue
		}
		if err := unix.Lremovexattr(path, metadataXattrPrefix+k); err != nil && !errors.Is(err, unix.ENODATA) {
			return fsError(path, err)
		}
	}
	for k, v := range md {
		if err := unix.Lsetxattr(path, metadataXattrPrefix+k, []byte(v), 0); err != nil {
			if errors.Is(err, unix.ENOTSUP) {
				return errorf(codeFailedPrecondition, "the file system of %s does not support file metadata (extended attributes)", path)
			}
			return fsError(path, err)
		}
	}
	return nil
}

// readMetadata returns the file's user.e2b.* attributes; nil when none
// (or when the file system keeps none).
func readMetadata(path string) map[string]string {
	buf := make([]byte, 1024)
	n, err := unix.Llistxattr(path, buf)
	if errors.Is(err, unix.ERANGE) {
		if n, err = unix.Llistxattr(path, nil); err == nil {
			buf = make([]byte, n)
			n, err = unix.Llistxattr(path, buf)
		}
	}
	if err != nil || n <= 0 {
		return nil
	}
	var md map[string]string
	for _, name := range bytes.Split(buf[:n], []byte{0}) {
		key, ok := strings.CutPrefix(string(name), metadataXattrPrefix)
		if !ok || key == "" {
			continue
		}
		v := make([]byte, 256)
		vn, err := unix.Lgetxattr(path, string(name), v)
		if errors.Is(err, unix.ERANGE) {
			if vn, err = unix.Lgetxattr(path, string(name), nil); err == nil {
				v = make([]byte, vn)
				vn, err = unix.Lgetxattr(path, string(name), v)
			}
		}
		if err != nil {
			continue
		}
		if md == nil {
			md = map[string]string{}
		}
		md[key] = string(v[:vn])
	}
	return md
}
