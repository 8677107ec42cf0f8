package image

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// ent is one tar entry of a hand-made layer.
type ent struct {
	name string
	typ  byte // 0: regular file
	body string
	mode int64
	link string
	uid  int
	dev  [2]int64 // major, minor of a device node
}

func tarBytes(t *testing.T, ents ...ent) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link,
			Uid: e.uid, Gid: e.uid, Devmajor: e.dev[0], Devminor: e.dev[1],
			ModTime: time.Unix(1700000000, 0), Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func layer(t *testing.T, ents ...ent) v1.Layer {
	t.Helper()
	b := tarBytes(t, ents...)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// testImage has a base layer and an upper layer that whites out a file and
// makes a directory opaque.
func testImage(t *testing.T) v1.Image {
	t.Helper()
	base := layer(t,
		ent{name: "etc/", typ: tar.TypeDir},
		ent{name: "usr/lib/os-release", body: "NAME=Test\nPRETTY_NAME=\"Test Linux 1\"\n"},
		ent{name: "etc/os-release", typ: tar.TypeSymlink, link: "../usr/lib/os-release"},
		ent{name: "etc/hostname", body: "base\n"},
		ent{name: "etc/gone", body: "whited out\n"},
		ent{name: "bin/", typ: tar.TypeDir},
		ent{name: "bin/su", body: "#!/bin/sh\n", mode: 0o4755},
		ent{name: "bin/sh", body: "shell", mode: 0o755},
		ent{name: "bin/bash", typ: tar.TypeLink, link: "bin/sh"},
		ent{name: "home/user/", typ: tar.TypeDir, mode: 0o750, uid: 1000},
		ent{name: "home/user/.profile", body: "x", uid: 1000},
		ent{name: "opq/old", body: "lower"},
		ent{name: "ro/", typ: tar.TypeDir, mode: 0o555},
		ent{name: "ro/file", body: "in a read-only dir"},
		ent{name: "dev/null", typ: tar.TypeChar, mode: 0o666, dev: [2]int64{1, 3}},
		ent{name: "lib/libc.so", body: "libc"},
	)
	upper := layer(t,
		ent{name: "etc/.wh.gone"},
		ent{name: "etc/hostname", body: "upper\n"},
		ent{name: "opq/", typ: tar.TypeDir},
		ent{name: "opq/.wh..wh..opq"},
		ent{name: "opq/new", body: "upper"},
		ent{name: "lib/libc.so.6", typ: tar.TypeLink, link: "lib/libc.so"}, // to a lower layer's file
	)
	img, err := mutate.AppendLayers(empty.Image, base, upper)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// push serves a registry on loopback and pushes img as repo:tag.
func push(t *testing.T, img v1.Image, repoTag string) (ref string, srv *httptest.Server) {
	t.Helper()
	srv = httptest.NewServer(registry.New(registry.Logger(nullLogger())))
	t.Cleanup(srv.Close)
	ref = strings.TrimPrefix(srv.URL, "http://") + "/" + repoTag
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
	return ref, srv
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func checkTestRootfs(t *testing.T, r Rootfs) {
	t.Helper()
	d := r.Dir
	if got := readFile(t, filepath.Join(d, "etc/hostname")); got != "upper\n" {
		t.Errorf("etc/hostname = %q, want the upper layer's", got)
	}
	if _, err := os.Lstat(filepath.Join(d, "etc/gone")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("etc/gone survived its whiteout: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(d, "opq/old")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("opq/old survived the opaque whiteout: %v", err)
	}
	if got := readFile(t, filepath.Join(d, "opq/new")); got != "upper" {
		t.Errorf("opq/new = %q", got)
	}
	for _, p := range []string{"etc/.wh.gone", "opq/.wh..wh..opq"} {
		if _, err := os.Lstat(filepath.Join(d, p)); err == nil {
			t.Errorf("whiteout marker %s was written", p)
		}
	}
	if l, err := os.Readlink(filepath.Join(d, "etc/os-release")); err != nil || l != "../usr/lib/os-release" {
		t.Errorf("etc/os-release symlink = %q, %v", l, err)
	}
	if fi, err := os.Stat(filepath.Join(d, "bin/su")); err != nil || fi.Mode()&os.ModeSetuid == 0 || fi.Mode().Perm() != 0o755 {
		t.Errorf("bin/su mode = %v, %v; want setuid 0755", fi.Mode(), err)
	}
	a, _ := os.Stat(filepath.Join(d, "bin/sh"))
	b, _ := os.Stat(filepath.Join(d, "bin/bash"))
	if a == nil || b == nil || !os.SameFile(a, b) {
		t.Errorf("bin/bash is not a hardlink of bin/sh")
	}
	if fi, err := os.Stat(filepath.Join(d, "ro")); err != nil || fi.Mode().Perm() != 0o555 {
		t.Errorf("ro mode = %v, %v; want 0555", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(d, "home/user")); err != nil || fi.Mode().Perm() != 0o750 {
		t.Errorf("home/user mode = %v, %v", fi.Mode(), err)
	} else if os.Geteuid() == 0 && fi.Sys().(*syscall.Stat_t).Uid != 1000 {
		t.Errorf("home/user owner = %d, want 1000", fi.Sys().(*syscall.Stat_t).Uid)
	}
	a, _ = os.Stat(filepath.Join(d, "lib/libc.so"))
	b, _ = os.Stat(filepath.Join(d, "lib/libc.so.6"))
	if a == nil || b == nil || !os.SameFile(a, b) {
		t.Errorf("lib/libc.so.6 is not a hardlink of the lower layer's lib/libc.so")
	}
	// Device nodes need privilege: made when it is there, skipped otherwise.
	fi, err := os.Lstat(filepath.Join(d, "dev/null"))
	if os.Geteuid() == 0 && (err != nil || fi.Mode()&os.ModeCharDevice == 0 || fi.Sys().(*syscall.Stat_t).Rdev != 0x103) {
		t.Errorf("dev/null = %v, %v; want char device 1,3", fi, err)
	}
	if r.OSRelease != "Test Linux 1" {
		t.Errorf("OSRelease = %q", r.OSRelease)
	}
}

func TestResolve_PullsFromLoopbackRegistryAndFlattensWhiteouts(t *testing.T) {
	img := testImage(t)
	ref, _ := push(t, img, "test/rt:v1")
	s := &Store{Root: t.TempDir()}
	r, err := s.Resolve(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	if r.Digest != want.String() || r.Ref != ref {
		t.Errorf("Rootfs = %+v, want digest %s", r, want)
	}
	if r.Dir != filepath.Join(s.Root, "rootfs", "sha256-"+want.Hex) {
		t.Errorf("Dir = %s", r.Dir)
	}
	checkTestRootfs(t, r)
	if ents, _ := os.ReadDir(filepath.Join(s.Root, "tmp")); len(ents) != 0 {
		t.Errorf("tmp/ left behind: %v", ents)
	}
}

func TestResolve_CacheHitByDigestAndOffline(t *testing.T) {
	ref, srv := push(t, testImage(t), "test/rt:v1")
	s := &Store{Root: t.TempDir(), Refresh: -1} // every Resolve asks the registry
	ctx := context.Background()
	r1, err := s.Resolve(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	// A file the unpack would not make tells whether the directory was redone.
	sentinel := filepath.Join(r1.Dir, "sentinel")
	if err := os.WriteFile(sentinel, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r2, err := s.Resolve(ctx, ref)
	if err != nil || r2 != r1 {
		t.Fatalf("second Resolve = %+v, %v; want %+v", r2, err, r1)
	}
	if _, err := os.Stat(sentinel); err != nil {
		t.Errorf("cache hit re-unpacked the rootfs: %v", err)
	}
	// The same image under another tag is the same rootfs.
	r3, err := s.Resolve(ctx, strings.Replace(ref, ":v1", "@"+r1.Digest, 1))
	if err != nil || r3.Dir != r1.Dir {
		t.Errorf("by digest: %+v, %v", r3, err)
	}
	srv.Close()
	r4, err := s.Resolve(ctx, ref)
	if err != nil || r4.Dir != r1.Dir {
		t.Errorf("offline Resolve = %+v, %v; want the cached %s", r4, err, r1.Dir)
	}
}

func TestResolve_MissingImageIsNotFound(t *testing.T) {
	ref, _ := push(t, testImage(t), "test/rt:v1")
	s := &Store{Root: t.TempDir()}
	_, err := s.Resolve(context.Background(), strings.Replace(ref, "test/rt:v1", "test/nope:v1", 1))
	var nf *NotFoundError
	if !errors.Is(err, ErrNotFound) || !errors.As(err, &nf) || nf.Unreachable {
		t.Errorf("unknown repository: %v; want a *NotFoundError, not unreachable", err)
	}
	_, err = s.Resolve(context.Background(), "127.0.0.1:1/test/rt:v1")
	if !errors.As(err, &nf) || !nf.Unreachable {
		t.Errorf("closed port: %v; want an unreachable *NotFoundError", err)
	}
}

func TestImport_DockerSaveTarballThenResolveOffline(t *testing.T) {
	img := testImage(t)
	tag, err := name.NewTag("127.0.0.1:1/saved/rt:v1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "saved.tar")
	if err := tarball.WriteToFile(p, tag, img); err != nil {
		t.Fatal(err)
	}
	s := &Store{Root: t.TempDir()}
	r, err := s.Import(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	if r.Digest != want.String() || r.Ref != "127.0.0.1:1/saved/rt:v1" {
		t.Errorf("Import = %+v", r)
	}
	checkTestRootfs(t, r)
	r2, err := s.Resolve(context.Background(), "127.0.0.1:1/saved/rt:v1")
	if err != nil || r2.Dir != r.Dir {
		t.Errorf("Resolve of the imported tag with no registry = %+v, %v", r2, err)
	}
}

func TestImport_OCILayout(t *testing.T) {
	img := testImage(t)
	dir := t.TempDir()
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": "hearth.test/layout/rt:v2"})); err != nil {
		t.Fatal(err)
	}
	s := &Store{Root: t.TempDir()}
	r, err := s.Import(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if r.Ref != "hearth.test/layout/rt:v2" {
		t.Errorf("Ref = %q", r.Ref)
	}
	checkTestRootfs(t, r)
}

func TestUnpack_RejectsPathEscapes(t *testing.T) {
	for _, tc := range []struct {
		name string
		ents []ent
	}{
		{"dotdot", []ent{{name: "../evil", body: "x"}}},
		{"inner dotdot", []ent{{name: "a/../../evil", body: "x"}}},
		{"through absolute symlink", []ent{{name: "a", typ: tar.TypeSymlink, link: "/"}, {name: "a/evil", body: "x"}}},
		{"through relative symlink", []ent{{name: "a", typ: tar.TypeSymlink, link: "../.."}, {name: "a/evil", body: "x"}}},
		{"hardlink out", []ent{{name: "a", typ: tar.TypeLink, link: "../outside"}}},
		{"whiteout of the parent", []ent{{name: ".wh..."}}},
		{"whiteout of the root", []ent{{name: "a/", typ: tar.TypeDir}, {name: "a/.wh.."}, {name: "a/.wh..."}}},
		{"whiteout through symlink", []ent{{name: "a", typ: tar.TypeSymlink, link: "/"}, {name: "a/.wh.outside"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			outside := filepath.Join(base, "outside")
			if err := os.WriteFile(outside, []byte("keep"), 0o644); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(base, "root", "rootfs")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			err := unpackTar(context.Background(), dir, bytes.NewReader(tarBytes(t, tc.ents...)))
			if !errors.Is(err, ErrUnsafePath) {
				t.Errorf("err = %v, want ErrUnsafePath", err)
			}
			if got := readFile(t, outside); got != "keep" {
				t.Errorf("outside file changed: %q", got)
			}
			for _, p := range []string{"/evil", filepath.Join(base, "evil"), filepath.Join(base, "root", "evil")} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("%s was written", p)
				}
			}
		})
	}
}

func TestImport_UnsafeImageLeavesNoRootfs(t *testing.T) {
	img, err := mutate.AppendLayers(empty.Image, layer(t,
		ent{name: "a", typ: tar.TypeSymlink, link: "/tmp"}, ent{name: "a/evil", body: "x"}))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "evil.tar")
	if err := tarball.WriteToFile(p, name.MustParseReference("hearth.test/evil:v1"), img); err != nil {
		t.Fatal(err)
	}
	s := &Store{Root: t.TempDir()}
	if _, err := s.Import(context.Background(), p); !errors.Is(err, ErrUnsafePath) {
		t.Errorf("Import = %v, want ErrUnsafePath", err)
	}
	for _, d := range []string{"rootfs", "tmp"} {
		if ents, _ := os.ReadDir(filepath.Join(s.Root, d)); len(ents) != 0 {
			t.Errorf("%s/ holds %v after a failed import", d, ents)
		}
	}
}

func TestResolve_DefaultAndBuiltinRefsAnswerWithTheBuiltinImage(t *testing.T) {
	s := &Store{Root: t.TempDir(), ProbeTimeout: 300 * time.Millisecond}
	// Stand in for a finished build, so no mmdebstrap runs.
	dir := s.rootfsDir(BuiltinDigest())
	if err := os.MkdirAll(filepath.Join(dir, "usr/lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "usr/lib/os-release"), []byte(`PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{BuiltinRef, DefaultRef} {
		r, err := s.Resolve(context.Background(), ref)
		if err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		if r.Dir != dir || r.Digest != BuiltinDigest() || r.Ref != ref || r.OSRelease != "Debian GNU/Linux 12 (bookworm)" {
			t.Errorf("%s: %+v", ref, r)
		}
	}
}

func TestBuiltinDigest_ChangesWithThePackageList(t *testing.T) {
	before := BuiltinDigest()
	saved := BuiltinPackages
	t.Cleanup(func() { BuiltinPackages = saved })
	BuiltinPackages = append(append([]string(nil), saved...), "python3-ipykernel")
	if BuiltinDigest() == before {
		t.Error("adding a package kept the digest: the cache would not rebuild")
	}
}

func TestResolve_MultiPlatformIndexGivesThisPlatformsImage(t *testing.T) {
	img := testImage(t)
	other, err := mutate.AppendLayers(empty.Image, layer(t, ent{name: "wrong", body: "arm"}))
	if err != nil {
		t.Fatal(err)
	}
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: other, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "riscv128"}}},
		mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}}},
	)
	srv := httptest.NewServer(registry.New(registry.Logger(nullLogger())))
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/multi/rt:v1"
	nref, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(nref, idx); err != nil {
		t.Fatal(err)
	}
	s := &Store{Root: t.TempDir()}
	r, err := s.Resolve(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	if r.Digest != want.String() {
		t.Errorf("Digest = %s, want the linux/%s image's %s", r.Digest, runtime.GOARCH, want)
	}
	checkTestRootfs(t, r)
}

// Within Refresh a resolved reference is answered without the registry, so
// booting a warm pool does not ask it once per VM.
func TestResolve_ReusesAResolutionWithinRefresh(t *testing.T) {
	img := testImage(t)
	var hits atomic.Int64
	reg := registry.New(registry.Logger(nullLogger()))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	ref := strings.TrimPrefix(srv.URL, "http://") + "/test/memo:v1"
	nref, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(nref, img); err != nil {
		t.Fatal(err)
	}
	s := &Store{Root: t.TempDir()}
	r1, err := s.Resolve(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	before := hits.Load()
	for i := 0; i < 5; i++ {
		r, err := s.Resolve(context.Background(), ref)
		if err != nil || r != r1 {
			t.Fatalf("Resolve #%d = %+v, %v; want %+v", i, r, err, r1)
		}
	}
	if n := hits.Load() - before; n != 0 {
		t.Errorf("%d registry requests within Refresh, want 0", n)
	}
}
