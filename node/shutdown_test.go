package node

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/vmmtest"
)

// shutdownDriver is the fake driver with vmm.Shutdowner (as qemu, whose
// Stop keeps the memory), counting Shutdown and Stop.
type shutdownDriver struct {
	*vmmtest.Driver
	shutdowns, stops atomic.Int32
}

func (d *shutdownDriver) Shutdown(ctx context.Context, h vmm.Handle) (vmm.Handle, error) {
	d.shutdowns.Add(1)
	return d.Driver.Stop(ctx, h)
}

func (d *shutdownDriver) Stop(ctx context.Context, h vmm.Handle) (vmm.Handle, error) {
	d.stops.Add(1)
	return d.Driver.Stop(ctx, h)
}

// A pause without memory, asked for or at the timeout, goes through the
// driver's Shutdown where it has one (its Stop would keep the memory: the
// guest would not boot again on resume).
func TestPauseWithoutMemory_UsesTheDriversShutdown(t *testing.T) {
	drv := &shutdownDriver{Driver: newFakeDriver()}
	cfg := Config{Name: "n1", DataDir: t.TempDir(), Driver: drv, RootToken: testRoot, ReapInterval: 50 * time.Millisecond, RefillInterval: 50 * time.Millisecond,
		Limits: Limits{Default: time.Minute, Max: time.Hour}}
	a := runNode(t, cfg)
	if _, err := a.root.PutPools(bg, pools("img", 2)); err != nil {
		t.Fatal(err)
	}
	a.waitWarm(t, "img", 2)
	sb, err := a.root.Claim(bg, nodeapi.ClaimRequest{Template: "img"})
	if err != nil {
		t.Fatal(err)
	}
	keep := false
	if err := a.root.PauseWith(bg, sb.ID, nodeapi.PauseRequest{Memory: &keep}); err != nil {
		t.Fatal(err)
	}
	if s, st := drv.shutdowns.Load(), drv.stops.Load(); s != 1 || st != 0 {
		t.Fatalf("pause without memory: %d Shutdown, %d Stop; want 1, 0", s, st)
	}
	if err := a.root.Resume(bg, sb.ID); err != nil {
		t.Fatal(err)
	}

	auto, err := a.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", TTLSeconds: 1,
		Lifecycle: nodeapi.Lifecycle{OnTimeout: nodeapi.OnTimeoutPause, PauseWithoutMemory: true}})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) { // poll
		if got, err := a.root.Get(bg, auto.ID); err == nil && got.Paused {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the timeout did not pause the sandbox")
		}
	}
	if s, st := drv.shutdowns.Load(), drv.stops.Load(); s != 2 || st != 0 {
		t.Fatalf("auto-pause without memory: %d Shutdown, %d Stop; want 2, 0", s, st)
	}
}
