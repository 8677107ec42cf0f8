package agent

import (
	"errors"
	"io/fs"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// filesystem.Filesystem service: Stat, MakeDir, ListDir, Remove, Move.
//
// Paths are guest paths: absolute paths are used as they are; "~" and
// relative ones resolve, as envd's do, against the home of the request's
// account (the user the SDK names; see homeOf), else Options.Root. In a microVM the
// guest's root file system is the VM's own; for the sim backend the agent
// is a host process, so absolute paths are real host paths — the sim is a
// process, not a chroot.

type entryInfo struct {
	Name          string            `json:"name"`
	Type          string            `json:"type"`
	Path          string            `json:"path"`
	Size          string            `json:"size"`
	Mode          uint32            `json:"mode"`
	Permissions   string            `json:"permissions"`
	Owner         string            `json:"owner"`
	Group         string            `json:"group"`
	ModifiedTime  string            `json:"modifiedTime"`
	SymlinkTarget *string           `json:"symlinkTarget,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
}

const (
	fileTypeFile      = "FILE_TYPE_FILE"
	fileTypeDirectory = "FILE_TYPE_DIRECTORY"
	fileTypeSymlink   = "FILE_TYPE_SYMLINK"
)

// resolve turns a guest path into an absolute, cleaned path, resolving
// "~" and relative paths against the home of acct (see homeOf).
func (a *agent) resolve(p string, acct *account) string {
	home := a.homeOf(acct)
	switch {
	case p == "~":
		return home
	case strings.HasPrefix(p, "~/"):
		return filepath.Join(home, p[2:])
	case filepath.IsAbs(p):
		return filepath.Clean(p)
	}
	return filepath.Join(home, p)
}

// homeOf is acct's home directory when it has an existing one, else
// Options.Root: where its relative paths resolve and its processes start.
func (a *agent) homeOf(acct *account) string {
	if acct != nil && acct.home != "" {
		if fi, err := os.Stat(acct.home); err == nil && fi.IsDir() {
			return acct.home
		}
	}
	return a.o.Root
}

var (
	idNames   sync.Map // "u<uid>" / "g<gid>" → name
	nameOfUID = func(id uint32) string {
		if u, err := user.LookupId(strconv.FormatUint(uint64(id), 10)); err == nil {
			return u.Username
		}
		return strconv.FormatUint(uint64(id), 10)
	}
	nameOfGID = func(id uint32) string {
		if g, err := user.LookupGroupId(strconv.FormatUint(uint64(id), 10)); err == nil {
			return g.Name
		}
		return strconv.FormatUint(uint64(id), 10)
	}
)

func cachedName(prefix string, id uint32, f func(uint32) string) string {
	k := prefix + strconv.FormatUint(uint64(id), 10)
	if v, ok := idNames.Load(k); ok {
		return v.(string)
	}
	n := f(id)
	idNames.Store(k, n)
	return n
}

// entryOf describes path (not following a final symlink).
func entryOf(path string) (entryInfo, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return entryInfo{}, fsError(path, err)
	}
	return entryFromInfo(path, fi), nil
}

func entryFromInfo(path string, fi fs.FileInfo) entryInfo {
	e := entryInfo{
		Name:         fi.Name(),
		Path:         path,
		Size:         strconv.FormatInt(fi.Size(), 10),
		Mode:         uint32(fi.Mode().Perm()),
		Permissions:  fi.Mode().String(),
		ModifiedTime: fi.ModTime().UTC().Format(time.RFC3339Nano),
	}
	if path == "/" {
		e.Name = "/"
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		e.Type = fileTypeSymlink
		if t, ok := symlinkTarget(path); ok {
			e.SymlinkTarget = &t
		}
	case fi.IsDir():
		e.Type = fileTypeDirectory
	default:
		e.Type = fileTypeFile
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.Owner = cachedName("u", st.Uid, nameOfUID)
		e.Group = cachedName("g", st.Gid, nameOfGID)
	}
	e.Metadata = readMetadata(path)
	return e
}

// symlinkTarget is what the link at path resolves to, as envd reports
// it: the absolute path with every link followed. A dangling link (or
// loop) reports its own target, made absolute against the link's
// directory.
func symlinkTarget(path string) (string, bool) {
	if t, err := filepath.EvalSymlinks(path); err == nil {
		if abs, err := filepath.Abs(t); err == nil {
			return abs, true
		}
	}
	t, err := os.Readlink(path)
	if err != nil {
		return "", false
	}
	if !filepath.IsAbs(t) {
		t = filepath.Join(filepath.Dir(path), t)
	}
	return filepath.Clean(t), true
}

// fsError maps an OS error on path to a Connect error.
func fsError(path string, err error) error {
	switch {
	case strings.IndexByte(path, 0) >= 0:
		return errorf(codeInvalidArgument, "path %q holds a NUL byte", path)
	case errors.Is(err, fs.ErrNotExist):
		return errorf(codeNotFound, "path %s not found", path)
	case errors.Is(err, fs.ErrExist):
		return errorf(codeAlreadyExists, "path %s already exists", path)
	case errors.Is(err, fs.ErrPermission):
		return errorf(codePermissionDenied, "permission denied on %s", path)
	case errors.Is(err, syscall.ENOTDIR):
		return errorf(codeInvalidArgument, "a component of %s is not a directory", path)
	case errors.Is(err, syscall.EISDIR):
		return errorf(codeInvalidArgument, "path %s is a directory", path)
	}
	return errorf(codeInternal, "%s: %v", path, err)
}

type pathRequest struct {
	Path string `json:"path"`
}

func (r pathRequest) validate() error {
	if r.Path == "" {
		return errorf(codeInvalidArgument, "path is required")
	}
	return checkPath(r.Path)
}

// checkPath refuses a guest path no file system call can take: one
// holding a NUL byte.
func checkPath(p string) error {
	if strings.IndexByte(p, 0) >= 0 {
		return errorf(codeInvalidArgument, "path %q holds a NUL byte", p)
	}
	return nil
}

type listDirRequest struct {
	Path  string   `json:"path"`
	Depth flexUint `json:"depth"`
}

func (r listDirRequest) validate() error { return pathRequest{r.Path}.validate() }

type moveRequest struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
}

func (r moveRequest) validate() error {
	if r.Source == "" || r.Destination == "" {
		return errorf(codeInvalidArgument, "source and destination are required")
	}
	return nil
}

type entryResponse struct {
	Entry entryInfo `json:"entry"`
}

// writeEntry answers with the entry describing path.
func writeEntry(w http.ResponseWriter, path string) {
	e, err := entryOf(path)
	if err != nil {
		writeUnaryError(w, err)
		return
	}
	writeUnary(w, entryResponse{e})
}

func (a *agent) handleStat(w http.ResponseWriter, r *http.Request) {
	var req pathRequest
	acct, ok := a.decodeUnaryAs(w, r, &req)
	if !ok {
		return
	}
	writeEntry(w, a.resolve(req.Path, acct))
}

func (a *agent) handleMakeDir(w http.ResponseWriter, r *http.Request) {
	var req pathRequest
	acct, ok := a.decodeUnaryAs(w, r, &req)
	if !ok {
		return
	}
	p := a.resolve(req.Path, acct)
	if fi, err := os.Stat(p); err == nil {
		if fi.IsDir() {
			writeUnaryError(w, errorf(codeAlreadyExists, "directory %s already exists", p))
		} else {
			writeUnaryError(w, errorf(codeInvalidArgument, "path %s exists and is not a directory", p))
		}
		return
	}
	if err := mkdirAllAs(p, acct); err != nil {
		writeUnaryError(w, fsError(p, err))
		return
	}
	writeEntry(w, p)
}

// maxListEntries bounds one ListDir answer.
const maxListEntries = 100000

func (a *agent) handleListDir(w http.ResponseWriter, r *http.Request) {
	var req listDirRequest
	acct, ok := a.decodeUnaryAs(w, r, &req)
	if !ok {
		return
	}
	depth := int(req.Depth)
	if req.Depth == 0 {
		depth = 1
	}
	root := a.resolve(req.Path, acct)
	fi, err := os.Stat(root)
	if err != nil {
		writeUnaryError(w, fsError(root, err))
		return
	}
	if !fi.IsDir() {
		writeUnaryError(w, errorf(codeInvalidArgument, "path %s is not a directory", root))
		return
	}
	entries, err := listDir(root, depth)
	if err != nil {
		writeUnaryError(w, err)
		return
	}
	writeUnary(w, struct {
		Entries []entryInfo `json:"entries"`
	}{entries})
}

// listDir lists root down to depth levels (1 = direct children).
func listDir(root string, depth int) ([]entryInfo, error) {
	out := []entryInfo{}
	var walk func(dir string, level int) error
	walk = func(dir string, level int) error {
		des, err := os.ReadDir(dir)
		if err != nil {
			if level == 1 {
				return fsError(dir, err)
			}
			return nil // an unreadable subdirectory is skipped
		}
		for _, de := range des {
			if len(out) >= maxListEntries {
				return errorf(codeInvalidArgument, "directory %s has more than %d entries at depth %d", root, maxListEntries, depth)
			}
			p := filepath.Join(dir, de.Name())
			fi, err := de.Info()
			if err != nil {
				continue // removed meanwhile
			}
			out = append(out, entryFromInfo(p, fi))
			if de.IsDir() && level < depth {
				if err := walk(p, level+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(root, 1); err != nil {
		return nil, err
	}
	return out, nil
}

func (a *agent) handleRemove(w http.ResponseWriter, r *http.Request) {
	var req pathRequest
	// Like envd: removing what is not there succeeds (os.RemoveAll).
	acct, ok := a.decodeUnaryAs(w, r, &req)
	if !ok {
		return
	}
	p := a.resolve(req.Path, acct)
	if err := os.RemoveAll(p); err != nil {
		writeUnaryError(w, fsError(p, err))
		return
	}
	writeUnary(w, struct{}{})
}

func (a *agent) handleMove(w http.ResponseWriter, r *http.Request) {
	var req moveRequest
	acct, ok := a.decodeUnaryAs(w, r, &req)
	if !ok {
		return
	}
	src, dst := a.resolve(req.Source, acct), a.resolve(req.Destination, acct)
	if _, err := os.Lstat(src); err != nil {
		writeUnaryError(w, fsError(src, err))
		return
	}
	if err := mkdirAllAs(filepath.Dir(dst), acct); err != nil {
		writeUnaryError(w, fsError(dst, err))
		return
	}
	if err := os.Rename(src, dst); err != nil {
		writeUnaryError(w, fsError(dst, err))
		return
	}
	writeEntry(w, dst)
}
