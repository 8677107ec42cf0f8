package firecracker_test

import (
	"context"
	"errors"
	"os/exec"
	"testing"
	"time"

	"github.com/hearthvm/hearth/vmm"
	fc "github.com/hearthvm/hearth/vmm/firecracker"
	"github.com/hearthvm/hearth/vmm/internal/restvm/restvmtest"
)

// A VMM that exits before its API answers fails the boot at once, as
// vmm.ErrVMMExited, not at the start timeout; nothing is left behind.
func TestBoot_VMMThatExitsFailsAtOnce(t *testing.T) {
	exits, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true(1) on PATH")
	}
	d, err := fc.New(fc.Options{RootDir: t.TempDir(), Binary: exits, Kernel: restvmtest.FakeKernel(t), StartTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = d.Boot(context.Background(), vmm.Spec{ID: "vm-exits", Template: "t", Net: "none", Size: "small", Token: "tok"})
	if !errors.Is(err, vmm.ErrVMMExited) {
		t.Fatalf("Boot with a VMM that exits: %v, want ErrVMMExited", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("Boot with a VMM that exits failed after %v, at the start timeout", el)
	}
	restvmtest.NoLeaks(t, d, d.RootDir())
}
