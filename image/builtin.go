package image

import (
	"bufio"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
)

// BuiltinRef names the built-in image: always built locally, never pulled.
const BuiltinRef = "hearth.local/debian:bookworm"

// DefaultRef is the default pool's image. Resolve pulls it when its registry
// serves it (within Store.ProbeTimeout) and otherwise answers with the
// built-in image.
const DefaultRef = "ghcr.io/cocoonstack/sandbox/rt:24.04"

// BuiltinSuite is the Debian release the built-in image is built from.
const BuiltinSuite = "bookworm"

// BuiltinPackages are installed into the built-in image on top of Debian's
// minbase variant. They and build-rootfs.sh are hashed into the built-in
// image's digest, so changing either makes the next BuildDefault rebuild.
//
// python3-matplotlib is there for the code interpreter's charts (a figure
// comes back as a PNG result, docs/API.md#code-interpreter).
// python-is-python3 (`python` is python3) and attr (getfattr, setfattr)
// are there because e2b's base image has them and code written for it
// calls them.
// python3-munkres is named so that it, not python3-scipy (about 700 MB with
// pythran, boost and a compiler), satisfies python3-fonttools' "python3-scipy
// | python3-munkres".
var BuiltinPackages = []string{
	"bash", "coreutils", "python3", "python3-pip", "python3-venv", "git", "curl",
	"ca-certificates", "sudo", "procps", "iproute2", "python3-matplotlib",
	"python3-munkres", "python-is-python3", "attr",
}

//go:embed build-rootfs.sh
var buildScript string

// BuiltinDigest is the digest the built-in image is cached under:
// "builtin:" and the sha256 of its recipe (suite, packages, build script).
func BuiltinDigest() string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s", BuiltinSuite, strings.Join(BuiltinPackages, "\n"), buildScript)
	return "builtin:" + hex.EncodeToString(h.Sum(nil))
}

// BuildDefault returns the built-in image, building it first if the cache
// has none for the current recipe: mmdebstrap (root, or unshare mode with
// subuids) streams the root filesystem as a tar into the cache. That takes
// minutes and needs Debian's package mirror; progress lines go to progress
// (nil: discarded), at least every 15 seconds. Concurrent builds, also from
// other processes, wait for one another and build once.
func (s *Store) BuildDefault(ctx context.Context, progress io.Writer) (Rootfs, error) {
	digest := BuiltinDigest()
	if r, ok := s.Lookup(digest); ok {
		r.Ref = BuiltinRef
		return r, nil
	}
	if progress == nil {
		progress = io.Discard
	}
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		return Rootfs{}, fmt.Errorf("image: building the built-in image needs mmdebstrap (hack/setup.d/10-packages.sh installs it): %w", err)
	}
	unlock, err := s.lock("builtin", progress)
	if err != nil {
		return Rootfs{}, err
	}
	defer unlock()
	if r, ok := s.Lookup(digest); ok { // built while we waited
		r.Ref = BuiltinRef
		return r, nil
	}
	start := time.Now()
	fmt.Fprintf(progress, "image: building %s (%s, %d packages) into %s\n", BuiltinRef, BuiltinSuite, len(BuiltinPackages), s.rootfsDir(digest))
	err = s.commit(digest, func(dir string) error { return runBuild(ctx, dir, progress, start) })
	if err != nil {
		return Rootfs{}, fmt.Errorf("image: building %s: %w", BuiltinRef, err)
	}
	fmt.Fprintf(progress, "image: built %s in %s\n", BuiltinRef, time.Since(start).Round(time.Second))
	r, _ := s.Lookup(digest)
	r.Ref = BuiltinRef
	return r, nil
}

// runBuild runs build-rootfs.sh and unpacks its tar output into dir.
func runBuild(ctx context.Context, dir string, progress io.Writer, start time.Time) error {
	script := filepath.Join(filepath.Dir(dir), filepath.Base(dir)+"-build-rootfs.sh")
	if err := os.WriteFile(script, []byte(buildScript), 0o755); err != nil {
		return err
	}
	defer os.Remove(script)
	cmd := exec.CommandContext(ctx, "sh", append([]string{script, BuiltinSuite}, BuiltinPackages...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	errOut, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	var lastLine atomic.Int64
	lastLine.Store(time.Now().UnixNano())
	logDone := make(chan struct{})
	var tail []string // the last lines, for the error
	go func() {
		defer close(logDone)
		sc := bufio.NewScanner(errOut)
		for sc.Scan() {
			fmt.Fprintf(progress, "image: [%s] %s\n", time.Since(start).Round(time.Second), sc.Text())
			lastLine.Store(time.Now().UnixNano())
			tail = append(tail, sc.Text())
			if len(tail) > 20 {
				tail = tail[1:]
			}
		}
	}()
	cr := &countReader{r: out}
	stop := make(chan struct{})
	go func() { // a minute of silence looks like a hang
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if time.Since(time.Unix(0, lastLine.Load())) >= 15*time.Second {
					fmt.Fprintf(progress, "image: [%s] still building, %d MiB unpacked\n",
						time.Since(start).Round(time.Second), cr.n.Load()>>20)
					lastLine.Store(time.Now().UnixNano())
				}
			}
		}
	}()
	uerr := unpackTar(ctx, dir, cr)
	if uerr != nil {
		io.Copy(io.Discard, out) // let mmdebstrap finish or fail on its own
	}
	close(stop)
	<-logDone
	werr := cmd.Wait()
	if werr != nil {
		return fmt.Errorf("build-rootfs.sh: %w\n%s", werr, strings.Join(tail, "\n"))
	}
	return uerr
}

type countReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// lock takes an exclusive flock on locks/<name>, telling progress when it
// has to wait.
func (s *Store) lock(name string, progress io.Writer) (func(), error) {
	dir := filepath.Join(s.Root, "locks")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); errors.Is(err, syscall.EWOULDBLOCK) {
		fmt.Fprintf(progress, "image: waiting for another build of %s\n", name)
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

func isBuiltin(ref string) bool { return sameRef(ref, BuiltinRef) }
func isDefault(ref string) bool { return sameRef(ref, DefaultRef) }

func sameRef(a, b string) bool {
	if a == b {
		return true
	}
	na, err1 := name.ParseReference(a)
	nb, err2 := name.ParseReference(b)
	return err1 == nil && err2 == nil && na.Name() == nb.Name()
}

// osRelease reads PRETTY_NAME from the rootfs's os-release without leaving
// it (etc/os-release is usually a symlink, followed only when relative).
func osRelease(dir string) string {
	for _, p := range []string{"usr/lib/os-release", "etc/os-release"} {
		full := filepath.Join(dir, p)
		fi, err := os.Lstat(full)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		b, err := os.ReadFile(full)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "PRETTY_NAME="); ok {
				return strings.Trim(v, `"'`)
			}
		}
	}
	return ""
}
