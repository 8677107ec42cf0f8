package qemu

import (
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/hearthvm/hearth/vmm"
)

// A checkpoint's RAM copy stops at the snapshot byte bound (zeros are
// holes and count nothing), and a checkpoint directory over the bound is
// refused.
func TestSnapshotLimit_StopsTheCopy(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "ram")
	data := make([]byte, 1<<20)
	_, _ = rand.Read(data)
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, 64<<20); err != nil { // 64 MiB of zeros, then 1 MiB of data
		t.Fatal(err)
	}
	f.Close()
	if _, err := copySparse(src, filepath.Join(dir, "over"), 512<<10); !errors.Is(err, vmm.ErrSnapshotTooLarge) {
		t.Fatalf("a 1 MiB copy within 512 KiB: %v", err)
	}
	n, err := copySparse(src, filepath.Join(dir, "within"), 2<<20)
	if err != nil || n != 65<<20 {
		t.Fatalf("a 1 MiB copy within 2 MiB: %d %v", n, err)
	}
	out := t.TempDir()
	if _, err := copySparse(src, filepath.Join(out, "mem"), -1); err != nil {
		t.Fatal(err)
	}
	if err := withinLimit(out, 4<<20); err != nil {
		t.Fatalf("1 MiB within 4 MiB: %v", err)
	}
	if err := withinLimit(out, 512<<10); !errors.Is(err, vmm.ErrSnapshotTooLarge) {
		t.Fatalf("1 MiB within 512 KiB: %v", err)
	}
	if err := withinLimit(out, -1); err != nil {
		t.Fatalf("no limit: %v", err)
	}
}
