package backends

import (
	"os"
	"path/filepath"
	"testing"
)

func TestOpen_QEMU(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "qemu.json")
	if err := os.WriteFile(cfg, []byte(`{"templates":{"*":{"kernel":"vmlinuz","initrd":"initrd.cpio.gz"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := Open("qemu", Options{RootDir: filepath.Join(dir, "vms"), Extra: map[string]string{"config": cfg, "accel": "tcg"}})
	if err != nil || d.Name() != "qemu" {
		t.Fatalf("Open(qemu) = %v, %v", d, err)
	}
	if a, ok := d.(interface{ Accel() string }); !ok || a.Accel() != "tcg" {
		t.Fatalf("qemu driver does not report its accelerator")
	}
	if _, err := Open("qemu", Options{RootDir: dir, Extra: map[string]string{"config": filepath.Join(dir, "missing.json")}}); err == nil {
		t.Fatal("opened with a missing config")
	}
	if _, err := Open("qemu", Options{RootDir: dir, Extra: map[string]string{"config": cfg, "accel": "hvf"}}); err == nil {
		t.Fatal("opened with an unknown accelerator")
	}
}
