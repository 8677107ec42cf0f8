package cloudhypervisor_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/hearthvm/hearth/vmm"
	ch "github.com/hearthvm/hearth/vmm/cloudhypervisor"
	"github.com/hearthvm/hearth/vmm/cloudhypervisor/chfake"
	"github.com/hearthvm/hearth/vmm/internal/restvm/restvmtest"
	"github.com/hearthvm/hearth/vmm/internal/uds"
)

// TestMain doubles as the fake cloud-hypervisor binary: the driver under test
// spawns this test executable with HEARTH_FAKE_VMM=cloud-hypervisor.
func TestMain(m *testing.M) { restvmtest.FakeMain(m, chfake.EnvVar, "cloud-hypervisor", chfake.Main) }

var fakeEnv = []string{chfake.EnvVar + "=cloud-hypervisor"}

func fakeDriver(t *testing.T) *ch.Driver {
	t.Helper()
	d, err := ch.New(ch.Options{
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

// realDriver runs against a real Cloud Hypervisor when the environment names one.
func realDriver(t *testing.T) *ch.Driver {
	t.Helper()
	bin, kernel := os.Getenv("HEARTH_CLOUD_HYPERVISOR_BIN"), os.Getenv("HEARTH_CH_KERNEL")
	if bin == "" || kernel == "" {
		t.Skip("real Cloud Hypervisor not configured: set HEARTH_CLOUD_HYPERVISOR_BIN and HEARTH_CH_KERNEL, optionally HEARTH_CH_INITRAMFS / HEARTH_CH_ROOTFS / HEARTH_CH_MEMORY_RESTORE_MODE; the guest must run sandbox-agent behind vsock port 49983 and read hearth.token= from /proc/cmdline; needs /dev/kvm")
	}
	d, err := ch.New(ch.Options{
		RootDir: t.TempDir(), Binary: bin, Kernel: kernel,
		Initramfs: os.Getenv("HEARTH_CH_INITRAMFS"), Rootfs: os.Getenv("HEARTH_CH_ROOTFS"),
		MemoryRestoreMode: os.Getenv("HEARTH_CH_MEMORY_RESTORE_MODE"),
		StartTimeout:      60 * time.Second,
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
	var info ch.VmInfo
	if err := c.Do(context.Background(), "GET", ch.API+"/vm.info", nil, &info); err != nil {
		t.Fatal(err)
	}
	return info.State
}

var backend = restvmtest.Backend{
	Name:         ch.Name,
	State:        vmState,
	Running:      ch.StateRunning,
	Paused:       ch.StatePaused,
	ReadManifest: ch.ReadManifest,
}

func TestLifecycle_Fake(t *testing.T) { restvmtest.Lifecycle(t, fakeDriver(t), backend) }

func TestLifecycle_RealCloudHypervisor(t *testing.T) {
	restvmtest.Lifecycle(t, realDriver(t), backend)
}

func TestBoot_RejectedConfigLeavesNothing(t *testing.T) {
	restvmtest.BadSpecsRejected(t, fakeDriver(t))
	// A kernel the VMM cannot open: vm.boot's 500 surfaces, nothing leaks.
	bad, err := ch.New(ch.Options{RootDir: t.TempDir(), Binary: restvmtest.Exe(t), Env: fakeEnv, Kernel: "/nonexistent/vmlinux"})
	if err != nil {
		t.Fatal(err)
	}
	apiErr := restvmtest.BadKernelBoot(t, bad)
	if apiErr.Status != http.StatusInternalServerError || apiErr.Path != ch.API+"/vm.boot" {
		t.Fatalf("boot with a missing kernel: %v", apiErr)
	}
	var msgs []string
	if json.Unmarshal([]byte(apiErr.Body), &msgs) != nil || len(msgs) == 0 {
		t.Errorf("error body %q is not a JSON array of messages", apiErr.Body)
	}
	restvmtest.NoLeaks(t, bad, bad.RootDir())
}

func TestClone_InvalidCheckpoint(t *testing.T) { restvmtest.CloneInvalidCheckpoint(t, fakeDriver(t)) }

// BenchmarkClone measures snapshot → clone (to agent answering) → destroy
// against the fake VMM process: the driver's own overhead (spawn, API,
// relay, health, re-key), not a real VMM's restore time.
func BenchmarkClone(b *testing.B) {
	d, err := ch.New(ch.Options{RootDir: b.TempDir(), Binary: restvmtest.Exe(b), Env: fakeEnv, Kernel: restvmtest.FakeKernel(b)})
	if err != nil {
		b.Fatal(err)
	}
	restvmtest.BenchClone(b, d)
}
