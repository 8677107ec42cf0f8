package vmm_test

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/hearthvm/hearth/vmm"
)

// CopySparse copies data only (holes stay holes, zeros become holes), keeps
// the length, and stops at its limit leaving nothing.
func TestCopySparse_HolesZerosLimitAndNoSymlink(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 1<<20)
	_, _ = rand.Read(data)
	if _, err := f.WriteAt(data, 100<<20); err != nil { // 100 MiB hole, 1 MiB data
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, 4<<20), 200<<20); err != nil { // 4 MiB of written zeros
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	dst := filepath.Join(dir, "dst")
	n, err := vmm.CopySparse(ctx, src, dst, -1, true)
	if err != nil || n != 1<<20 {
		t.Fatalf("CopySparse wrote %d bytes: %v", n, err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(dst, &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != 1<<30 || st.Blocks*512 > 2<<20 {
		t.Fatalf("copy: size %d, %d bytes on disk", st.Size, st.Blocks*512)
	}
	got := make([]byte, len(data))
	g, _ := os.Open(dst)
	_, _ = g.ReadAt(got, 100<<20)
	g.Close()
	if string(got) != string(data) {
		t.Fatal("the copy's data differs")
	}
	over := filepath.Join(dir, "over")
	if _, err := vmm.CopySparse(ctx, src, over, 512<<10, false); !errors.Is(err, vmm.ErrSnapshotTooLarge) {
		t.Fatalf("1 MiB within 512 KiB: %v", err)
	}
	if _, err := os.Lstat(over); !os.IsNotExist(err) {
		t.Fatalf("a stopped copy left %s: %v", over, err)
	}
	if err := os.Symlink(src, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := vmm.CopySparse(ctx, filepath.Join(dir, "link"), filepath.Join(dir, "via-link"), -1, false); err == nil {
		t.Fatal("CopySparse followed a symlink")
	}
}
