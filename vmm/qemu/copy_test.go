package qemu

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// sparseFile makes a file of size bytes holding random data of n bytes at
// each offset of at (the rest holes) and returns its path and content.
func sparseFile(t testing.TB, size int64, n int, at ...int64) (string, []byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ram")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	var want []byte
	if size <= 64<<20 {
		want = make([]byte, size)
	}
	for _, off := range at {
		data := make([]byte, n)
		_, _ = rand.Read(data)
		if _, err := f.WriteAt(data, off); err != nil {
			t.Fatal(err)
		}
		if want != nil {
			copy(want[off:], data)
		}
	}
	return path, want
}

// TestCopySparse_CopiesEveryByteAndKeepsHoles: the copy of a RAM file is
// its content byte for byte, whatever its data extents' alignment, at its
// length (a trailing hole included), and takes about its data's blocks on
// disk, not its length.
func TestCopySparse_CopiesEveryByteAndKeepsHoles(t *testing.T) {
	const size = 48 << 20
	src, want := sparseFile(t, size, 100<<10, 0, 5<<20+4096, 9<<20+123, 30<<20-7)
	dst := filepath.Join(t.TempDir(), "mem")
	n, err := copySparse(src, dst, -1)
	if err != nil || n != size {
		t.Fatalf("copySparse = %d, %v; want %d", n, err, size)
	}
	got, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the copy differs from its source")
	}
	st, _ := os.Stat(dst)
	if used := st.Sys().(*syscall.Stat_t).Blocks * 512; used > 2<<20 {
		t.Fatalf("the copy of 400 KiB of data takes %d bytes", used)
	}
}

// BenchmarkCopySparse_2GiBRAMFile: a small sandbox's RAM file (2 GiB, the
// table's small) of which its guest touched 64 MiB.
func BenchmarkCopySparse_2GiBRAMFile(b *testing.B) {
	var at []int64
	for off := int64(0); off < 2<<30; off += 32 << 20 {
		at = append(at, off)
	}
	src, _ := sparseFile(b, 2<<30, 1<<20, at...)
	dir := b.TempDir()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		dst := filepath.Join(dir, "mem")
		if _, err := copySparse(src, dst, -1); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		os.Remove(dst)
		b.StartTimer()
	}
}
