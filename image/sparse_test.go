package image

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// sparseTar is a layer holding one PAX (GNU 1.0) sparse file name of
// logical size size: one 4-byte data region ("data") at offset 0, then a
// hole up to size. archive/tar does not write sparse files, so the PAX
// header is written as a file and its type flag patched to 'x'.
func sparseTar(t *testing.T, name string, size int64) []byte {
	t.Helper()
	rec := func(k, v string) string {
		for n := len(k) + len(v) + 3; ; n++ {
			if s := fmt.Sprintf("%d %s=%s\n", n, k, v); len(s) == n {
				return s
			}
		}
	}
	pax := rec("GNU.sparse.major", "1") + rec("GNU.sparse.minor", "0") + rec("GNU.sparse.name", name) + rec("GNU.sparse.realsize", fmt.Sprint(size))
	m := []byte("1\n0\n4\n") // one region: offset 0, length 4
	data := append(append(m, make([]byte, 512-len(m))...), "data"...)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range []struct {
		name string
		body []byte
	}{{"PaxHeaders/x", []byte(pax)}, {"GNUSparseFile.0/" + name, data}} {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(e.body)), Format: tar.FormatUSTAR}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	b[156] = tar.TypeXHeader
	copy(b[148:156], "        ")
	sum := 0
	for _, c := range b[:512] {
		sum += int(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

// A sparse file is written with its holes as holes, at its logical size;
// one declaring more than maxSparseSize (a few bytes of tar can declare
// exabytes, which the reader would hand over as zeros) is refused.
func TestUnpack_SparseFiles(t *testing.T) {
	root := t.TempDir()
	const size = 64 << 20
	if err := unpackTar(context.Background(), root, bytes.NewReader(sparseTar(t, "sparse", size))); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, "sparse")
	fi, err := os.Stat(p)
	if err != nil || fi.Size() != size {
		t.Fatalf("sparse file: %v %v; want %d bytes", fi, err, size)
	}
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	if used := st.Blocks * 512; used > 1<<20 {
		t.Fatalf("the sparse file of %d bytes takes %d bytes of disk: its holes were written", size, used)
	}
	f, _ := os.Open(p)
	head := make([]byte, 4)
	_, _ = f.Read(head)
	f.Close()
	if string(head) != "data" {
		t.Fatalf("sparse file starts %q", head)
	}

	err = unpackTar(context.Background(), t.TempDir(), bytes.NewReader(sparseTar(t, "huge", 1<<62)))
	if !errors.Is(err, ErrSparseTooLarge) {
		t.Fatalf("a sparse file of 4 EiB: %v, want ErrSparseTooLarge", err)
	}
}
