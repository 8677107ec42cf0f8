package image

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// tarOf builds a tar stream of entries for the seeds.
func tarOf(entries ...tar.Header) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range entries {
		h := h
		body := []byte(nil)
		if h.Typeflag == tar.TypeReg {
			body = []byte("data")
			h.Size = int64(len(body))
		}
		_ = tw.WriteHeader(&h)
		_, _ = tw.Write(body)
	}
	_ = tw.Close()
	return buf.Bytes()
}

// FuzzUnpackTar: a layer (outside input: any registry's image) never
// panics the unpacker and never writes outside the rootfs directory, by
// "..", absolute names, symlinks or hardlinks.
func FuzzUnpackTar(f *testing.F) {
	f.Add(tarOf(tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755}, tar.Header{Name: "etc/os-release", Typeflag: tar.TypeReg, Mode: 0o644}))
	f.Add(tarOf(tar.Header{Name: "../escape", Typeflag: tar.TypeReg, Mode: 0o644}))
	f.Add(tarOf(tar.Header{Name: "/abs", Typeflag: tar.TypeReg, Mode: 0o644}))
	f.Add(tarOf(tar.Header{Name: "link", Typeflag: tar.TypeSymlink, Linkname: "../.."}, tar.Header{Name: "link/escape", Typeflag: tar.TypeReg, Mode: 0o644}))
	f.Add(tarOf(tar.Header{Name: "hard", Typeflag: tar.TypeLink, Linkname: "../outside"}))
	f.Add(tarOf(tar.Header{Name: "a/.wh..wh..opq", Typeflag: tar.TypeReg}, tar.Header{Name: ".wh.a", Typeflag: tar.TypeReg}))
	// A sparse file costs its size in zeros read (not in disk space); keep
	// that small so the engine runs at its normal rate.
	defer func(old int64) { maxSparseSize = old }(maxSparseSize)
	maxSparseSize = 1 << 20
	// Each input unpacks into a directory of its own, on a memory file
	// system when the host has one: the engine runs hundreds of inputs a
	// second, and minimizes each new one with thousands more (bounded by
	// hack/fuzz.sh's -fuzzminimizetime), which a disk's journal and
	// discards would slow down.
	tmp := os.TempDir()
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		tmp = "/dev/shm"
	}
	f.Fuzz(func(t *testing.T, layer []byte) {
		parent, err := os.MkdirTemp(tmp, "FuzzUnpackTar")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(parent)
		outside := filepath.Join(parent, "outside")
		if err := os.WriteFile(outside, []byte("keep"), 0o600); err != nil {
			t.Fatal(err)
		}
		root := filepath.Join(parent, "root")
		if err := os.Mkdir(root, 0o755); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = unpackTar(context.Background(), root, bytes.NewReader(layer))
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			buf := make([]byte, 1<<20)
			t.Fatalf("unpacking a %d-byte layer takes more than 10s:\n%s", len(layer), buf[:runtime.Stack(buf, true)])
		}
		ents, err := os.ReadDir(parent)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if e.Name() != "root" && e.Name() != "outside" {
				t.Fatalf("the layer wrote %s outside the rootfs", e.Name())
			}
		}
		if b, err := os.ReadFile(outside); err != nil || string(b) != "keep" {
			t.Fatalf("the layer changed a file outside the rootfs: %q %v", b, err)
		}
		// Leave nothing read-only behind for t.TempDir's cleanup.
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				_ = os.Chmod(p, 0o755)
			}
			return nil
		})
	})
}

// FuzzSameRef: image reference comparison never panics and is reflexive
// and symmetric.
func FuzzSameRef(f *testing.F) {
	f.Add("python:3.12", "docker.io/library/python:3.12")
	f.Add(BuiltinRef, DefaultRef)
	f.Add("UPPER/case", "a@sha256:zz")
	f.Fuzz(func(t *testing.T, a, b string) {
		if !sameRef(a, a) {
			t.Fatalf("%q is not the same as itself", a)
		}
		if sameRef(a, b) != sameRef(b, a) {
			t.Fatalf("sameRef(%q, %q) is not symmetric", a, b)
		}
	})
}
