package firecracker_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/hearthvm/hearth/vmm"
	fc "github.com/hearthvm/hearth/vmm/firecracker"
	"github.com/hearthvm/hearth/vmm/firecracker/fcfake"
	"github.com/hearthvm/hearth/vmm/internal/restvm/restvmtest"
	"github.com/hearthvm/hearth/vmm/internal/uds"
)

// TestMain doubles as the fake firecracker binary: the driver under test
// spawns this test executable with HEARTH_FAKE_VMM=firecracker.
func TestMain(m *testing.M) { restvmtest.FakeMain(m, fcfake.EnvVar, "firecracker", fcfake.Main) }

var fakeEnv = []string{fcfake.EnvVar + "=firecracker"}

func fakeDriver(t *testing.T) *fc.Driver {
	t.Helper()
	d, err := fc.New(fc.Options{
		RootDir:      t.TempDir(),
		Binary:       restvmtest.Exe(t),
		Env:          fakeEnv,
		Kernel:       restvmtest.FakeKernel(t),
		StartTimeout: 20 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// realDriver runs against a real Firecracker when the environment names one.
func realDriver(t *testing.T) *fc.Driver {
	t.Helper()
	bin, kernel := os.Getenv("HEARTH_FIRECRACKER_BIN"), os.Getenv("HEARTH_FC_KERNEL")
	if bin == "" || kernel == "" {
		t.Skip("real Firecracker not configured: set HEARTH_FIRECRACKER_BIN and HEARTH_FC_KERNEL (vmlinux), optionally HEARTH_FC_INITRD / HEARTH_FC_ROOTFS; the guest must run sandbox-agent behind vsock port 49983 and read hearth.token= from /proc/cmdline; needs /dev/kvm")
	}
	d, err := fc.New(fc.Options{
		RootDir: t.TempDir(), Binary: bin, Kernel: kernel,
		Initrd: os.Getenv("HEARTH_FC_INITRD"), Rootfs: os.Getenv("HEARTH_FC_ROOTFS"),
		StartTimeout: 60 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func vmState(t *testing.T, h vmm.Handle) string {
	t.Helper()
	c := uds.NewClient(h.Meta["api_sock"])
	defer c.Close()
	var info fc.InstanceInfo
	if err := c.Do(context.Background(), "GET", "/", nil, &info); err != nil {
		t.Fatal(err)
	}
	return info.State
}

var backend = restvmtest.Backend{
	Name:         fc.Name,
	State:        vmState,
	Running:      fc.StateRunning,
	Paused:       fc.StatePaused,
	ReadManifest: fc.ReadManifest,
}

func TestLifecycle_Fake(t *testing.T) { restvmtest.Lifecycle(t, fakeDriver(t), backend) }

func TestLifecycle_RealFirecracker(t *testing.T) { restvmtest.Lifecycle(t, realDriver(t), backend) }

func TestBoot_RejectedConfigLeavesNothing(t *testing.T) {
	restvmtest.BadSpecsRejected(t, fakeDriver(t))
	// A kernel the VMM cannot open: Firecracker's 400 surfaces, nothing leaks.
	bad, err := fc.New(fc.Options{RootDir: t.TempDir(), Binary: restvmtest.Exe(t), Env: fakeEnv, Kernel: "/nonexistent/vmlinux"})
	if err != nil {
		t.Fatal(err)
	}
	apiErr := restvmtest.BadKernelBoot(t, bad)
	if apiErr.Status != http.StatusBadRequest || apiErr.Path != "/boot-source" {
		t.Fatalf("boot with a missing kernel: %v", apiErr)
	}
	var f fc.Fault
	if json.Unmarshal([]byte(apiErr.Body), &f) != nil || f.FaultMessage == "" {
		t.Errorf("error body %q is not a fault_message", apiErr.Body)
	}
	restvmtest.NoLeaks(t, bad, bad.RootDir())
}

func TestClone_InvalidCheckpoint(t *testing.T) { restvmtest.CloneInvalidCheckpoint(t, fakeDriver(t)) }

// BenchmarkClone measures snapshot → clone (to agent answering) → destroy
// against the fake VMM process: the driver's own overhead (spawn, API,
// relay, health, re-key), not a real VMM's restore time.
func BenchmarkClone(b *testing.B) {
	d, err := fc.New(fc.Options{RootDir: b.TempDir(), Binary: restvmtest.Exe(b), Env: fakeEnv, Kernel: restvmtest.FakeKernel(b)})
	if err != nil {
		b.Fatal(err)
	}
	restvmtest.BenchClone(b, d)
}
