package qemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/internal/uds"
)

// Clone implements vmm.Driver. The clone keeps the checkpoint's template,
// size and environment; spec supplies its id, token and lane.
func (d *Driver) Clone(ctx context.Context, dir string, spec vmm.Spec) (vmm.Handle, error) {
	if err := d.checkSpec(spec); err != nil {
		return vmm.Handle{}, err
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return vmm.Handle{}, err
	}
	man, err := readManifest(dir)
	if err != nil {
		return vmm.Handle{}, err
	}
	defer d.lock(spec.ID)()
	vdir := d.vmDir(spec.ID)
	if err := os.Mkdir(vdir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return vmm.Handle{}, fmt.Errorf("qemu: vm %q already exists", spec.ID)
		}
		return vmm.Handle{}, err
	}
	full := man.Spec
	// A clone holds only if the checkpoint's agent was started held: an
	// agent older than --hold has no opening to wait for, and the node
	// then enforces before it answers, as for any VM that does not hold.
	hold := spec.Hold && man.Spec.Hold
	full.ID, full.Token, full.Egress, full.ClaimEgress, full.Hold = spec.ID, spec.Token, spec.Egress, nil, hold
	if spec.Net != "" {
		full.Net = spec.Net
	}
	// The sandbox's own policy is in the filter before passt starts (as
	// SetEgress records it: rec.Egress): the clone's guest resumes running.
	// A policy this driver cannot enforce is the node's SetEgress's 409
	// after the clone, as for any claim.
	rec := record{Spec: full, Machine: man.Machine, Restrict: full.Net != "egress", Egress: spec.ClaimEgress}
	rec.Handle = vmm.Handle{ID: spec.ID, Backend: Backend, Dir: vdir, Token: man.Token, Hold: hold}
	if man.Memory == "file" {
		rec.MemPath = filepath.Join(dir, "mem")
	}
	var err2 error
	if man.Machine.Disk != "" {
		rec.DiskBase = man.DiskBase
		rec.Machine.Disk = filepath.Join(vdir, "disk.qcow2")
		err2 = d.newOverlay(ctx, rec.Machine.Disk, filepath.Join(dir, "disk.qcow2"), "qcow2")
	}
	h, err := vmm.Handle{}, err2
	if err == nil {
		h, err = d.launch(ctx, &rec, dir, d.o.BootTimeout)
	}
	// Re-key before returning: the checkpoint's token must never work on a
	// VM that can be handed out.
	if err == nil && spec.Token != man.Token {
		err = d.setIdentity(ctx, h.Addr, man.Token, spec.Token)
		if err == nil {
			rec.Handle.Token = spec.Token
		}
	}
	if err == nil {
		// The guest kernel counted the checkpoint's OOM kills: not the clone's.
		rec.OOMBase = d.cloneOOMBase(ctx, man, rec.Handle.Addr, rec.Handle.Token)
		h = rec.Handle
		err = uds.WriteJSON(filepath.Join(vdir, "vm.json"), rec)
	}
	if err != nil {
		d.discard(spec.ID, rec.Handle.PID, vdir)
		return vmm.Handle{}, err
	}
	return h, nil
}

// identityBackoff spaces setIdentity's tries: 20, 50 ms apart.
var identityBackoff = wait.Backoff{Duration: 50 * time.Millisecond, Steps: 20}

// setIdentity hands the agent at addr its new token, authenticated with
// old. A transport error is retried (the restored guest's network may not
// carry the request yet; identityBackoff); an answer other than 2xx is
// final.
func (d *Driver) setIdentity(ctx context.Context, addr, old, token string) error {
	c := &agentapi.Client{Addr: addr, Token: old, HTTP: d.httpc}
	var last error
	err := wait.ExponentialBackoffWithContext(ctx, identityBackoff, func(ctx context.Context) (bool, error) {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		last = c.SetIdentity(rctx, token)
		if agentapi.StatusOf(last) != 0 {
			return false, fmt.Errorf("qemu: agent identity: %w", last)
		}
		return last == nil, nil
	})
	if errors.Is(err, wait.ErrWaitTimeout) {
		return fmt.Errorf("qemu: agent identity: %w", last)
	}
	return err
}
