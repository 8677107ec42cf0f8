package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/internal/uds"
)

// Clone starts a new VM whose writable layer is a copy of the checkpoint's.
// The new VM's agent starts with spec.Token: the checkpointed VM's token is
// never valid on it (it lived only in the source's memory and tmpfs).
func (d *Driver) Clone(ctx context.Context, ckDir string, spec vmm.Spec) (vmm.Handle, error) {
	m, err := readManifest(ckDir)
	if err != nil {
		return vmm.Handle{}, err
	}
	if m.UIDBase != 0 && m.UIDBase != d.uidBase {
		return vmm.Handle{}, fmt.Errorf("%w: %s was taken with uid base %d, this driver maps %d", vmm.ErrSnapshotInvalid, ckDir, m.UIDBase, d.uidBase)
	}
	r := record{ID: spec.ID, Template: spec.Template, Net: spec.Net, Size: spec.Size, Env: spec.Env, From: ckDir, Egress: spec.Egress}
	if r.Template == "" {
		r.Template, r.Net, r.Size = m.Template, m.Net, m.Size
	}
	return d.create(ctx, spec, r, func(dir string) error {
		if _, err := vmm.CopySparse(ctx, filepath.Join(ckDir, diskImage), filepath.Join(dir, diskImage), -1, false); err != nil {
			return fmt.Errorf("%w: copying %s: %v", vmm.ErrSnapshotInvalid, ckDir, err)
		}
		return nil
	})
}

func readManifest(ckDir string) (manifest, error) {
	var m manifest
	b, err := os.ReadFile(filepath.Join(ckDir, manifestFile))
	if err != nil {
		return m, fmt.Errorf("%w: %v", vmm.ErrSnapshotInvalid, err)
	}
	if err := json.Unmarshal(b, &m); err != nil || m.Backend != Name {
		return m, fmt.Errorf("%w: %s: not a sim checkpoint", vmm.ErrSnapshotInvalid, ckDir)
	}
	if m.Version == 2 {
		return m, fmt.Errorf("%w: %s is a version 2 sim checkpoint (a copied directory, from before sandboxes had a sized disk); this node reads version %d only: take the snapshot again", vmm.ErrSnapshotInvalid, ckDir, manifestVersion)
	}
	if m.Version != manifestVersion {
		return m, fmt.Errorf("%w: %s: sim checkpoint version %d, this node reads %d", vmm.ErrSnapshotInvalid, ckDir, m.Version, manifestVersion)
	}
	if st, err := os.Lstat(filepath.Join(ckDir, diskImage)); err != nil || !st.Mode().IsRegular() {
		return m, fmt.Errorf("%w: %s has no disk image", vmm.ErrSnapshotInvalid, ckDir)
	}
	return m, nil
}

// Snapshot copies h's disk image (sparsely: what its file system holds,
// never its size) and a manifest into ckDir (which must not exist). A
// running VM is frozen and its disk flushed for the copy, and thawed
// afterwards; the host never walks the guest's files. A bound from
// vmm.WithSnapshotLimit stops the copy (vmm.ErrSnapshotTooLarge). Process
// state is not part of a sim checkpoint: a clone boots afresh on the
// copied disk.
func (d *Driver) Snapshot(ctx context.Context, h vmm.Handle, ckDir string) error {
	dir, err := d.dirOf(h)
	if err != nil {
		return err
	}
	r, err := readRecord(dir)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", vmm.ErrNotRunning, h.ID, err)
	}
	if _, err := os.Lstat(ckDir); err == nil {
		return fmt.Errorf("sim: checkpoint %s: %w", ckDir, ErrAlreadyExists)
	}
	if err := os.MkdirAll(filepath.Dir(ckDir), 0o700); err != nil {
		return err
	}
	tmp := ckDir + ".tmp-" + randHex(4)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(tmp)
		}
	}()
	owned, err := d.owns(r)
	if err != nil {
		return err
	}
	if !r.Paused && owned {
		cg := d.cgroupOf(r)
		if err := cg.freeze(true); err != nil {
			return err
		}
		defer cg.freeze(false)
	}
	pid := 0
	if owned {
		pid = r.PID
	}
	if err := syncDisk(dir, pid); err != nil {
		return fmt.Errorf("sim: snapshot of %s: flushing its disk: %w", h.ID, err)
	}
	img := filepath.Join(dir, diskImage)
	st, err := os.Lstat(img)
	if err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("%w: %s has no disk image (made by an earlier sim)", vmm.ErrNotRunning, h.ID)
	}
	bytes, err := vmm.CopySparse(ctx, img, filepath.Join(tmp, diskImage), vmm.SnapshotLimit(ctx), true)
	if err != nil {
		return fmt.Errorf("sim: snapshot of %s: %w", h.ID, err)
	}
	m := manifest{Backend: Name, Version: manifestVersion, SourceID: r.ID, Template: r.Template, Net: r.Net, Size: r.Size,
		UIDBase: d.uidBase, CreatedAt: time.Now().UTC(), DiskBytes: st.Size(), Bytes: bytes}
	if err := uds.WriteJSON(filepath.Join(tmp, manifestFile), m); err != nil {
		return err
	}
	if err := os.Rename(tmp, ckDir); err != nil {
		return err
	}
	ok = true
	return nil
}
