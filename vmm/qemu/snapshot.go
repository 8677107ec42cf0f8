package qemu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/internal/uds"
)

// Snapshot implements vmm.Driver.
func (d *Driver) Snapshot(ctx context.Context, h vmm.Handle, dir string) error {
	defer d.lock(h.ID)()
	rec, err := d.load(h)
	if err != nil {
		return err
	}
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("qemu: checkpoint dir %s already exists", dir)
	}
	q, err := d.live(ctx, rec)
	if err != nil {
		return err
	}
	defer q.Close()
	tmp := dir + ".tmp"
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return err
	}
	st, err := q.QueryStatus(ctx)
	if err != nil {
		return err
	}
	var kills *uint64
	if st.Running {
		kills = d.snapshotOOMKills(ctx, rec)
	}
	man, err := d.capture(ctx, q, rec, tmp, true)
	if st.Running {
		if cerr := q.Execute(ctx, "cont", nil, nil); cerr != nil && err == nil {
			err = cerr
		}
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	man.Paused, man.OOMKills = !st.Running, kills
	if err := uds.WriteJSON(filepath.Join(tmp, "snapshot.json"), man); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	return nil
}

// capture stops the VM and writes its state (and RAM file, and with
// withDisk a copy of its disk overlay) into dir. It leaves the VM stopped;
// the caller decides whether to cont. Without withDisk the manifest names
// the VM's own overlay (Stop: the VM keeps using it).
func (d *Driver) capture(ctx context.Context, q *QMP, rec record, dir string, withDisk bool) (manifest, error) {
	if err := q.Execute(ctx, "stop", nil, nil); err != nil {
		return manifest{}, err
	}
	shared := rec.MemPath != "" && rec.MemShared
	caps := []map[string]any{{"capability": "x-ignore-shared", "state": shared}}
	if err := q.Execute(ctx, "migrate-set-capabilities", map[string]any{"capabilities": caps}, nil); err != nil {
		return manifest{}, err
	}
	uri := "exec:cat > " + shellQuote(filepath.Join(dir, "state"))
	if err := q.Execute(ctx, "migrate", map[string]any{"uri": uri}, nil); err != nil {
		return manifest{}, err
	}
	for {
		var mi MigrationInfo
		if err := q.Execute(ctx, "query-migrate", nil, &mi); err != nil {
			return manifest{}, err
		}
		if mi.Status == "completed" {
			break
		}
		if mi.Status == "failed" || mi.Status == "cancelled" {
			return manifest{}, fmt.Errorf("qemu: migrate to %s: %s %s", dir, mi.Status, mi.ErrorDesc)
		}
		if err := sleepCtx(ctx, 10*time.Millisecond); err != nil {
			_ = q.Execute(context.Background(), "migrate_cancel", nil, nil)
			return manifest{}, err
		}
	}
	limit := vmm.SnapshotLimit(ctx)
	if err := withinLimit(dir, limit); err != nil {
		return manifest{}, err
	}
	man := manifest{Backend: Backend, Machine: rec.Machine, Memory: "stream", Token: rec.Handle.Token, Spec: rec.Spec, Created: time.Now().UTC()}
	man.Machine.HostPort = 0
	// The migration has flushed and released the disk; the overlay is
	// consistent with the captured device state until the VM runs again.
	if withDisk && rec.Machine.Disk != "" {
		if err := d.flatten(ctx, rec.Machine.Disk, filepath.Join(dir, "disk.qcow2"), rec.DiskBase, diskFormat(rec.DiskBase)); err != nil {
			return manifest{}, err
		}
		if err := withinLimit(dir, limit); err != nil {
			return manifest{}, err
		}
		man.Machine.Disk, man.DiskBase = "disk.qcow2", rec.DiskBase
	}
	if shared {
		left := int64(-1)
		if limit >= 0 {
			used, err := allocatedBytes(dir)
			if err != nil {
				return manifest{}, err
			}
			left = max(limit-used, 0)
		}
		n, err := copySparse(rec.MemPath, filepath.Join(dir, "mem"), left)
		if err != nil {
			return manifest{}, err
		}
		man.Memory, man.MemBytes = "file", n
	}
	return man, nil
}

// withinLimit fails with vmm.ErrSnapshotTooLarge when the checkpoint being
// written in dir takes more than limit bytes of the host's disk (negative:
// no limit). capture checks after each part (the migration stream, the
// flattened disk: each bounded by the VM's memory and disk size) and
// bounds the RAM file's copy itself.
func withinLimit(dir string, limit int64) error {
	if limit < 0 {
		return nil
	}
	used, err := allocatedBytes(dir)
	if err != nil {
		return err
	}
	if used > limit {
		return fmt.Errorf("%w: %s takes %d bytes, more than %d", vmm.ErrSnapshotTooLarge, filepath.Base(dir), used, limit)
	}
	return nil
}

// allocatedBytes is what the files directly in dir take on the host's disk.
func allocatedBytes(dir string) (int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			return 0, err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			n += st.Blocks * 512
		}
	}
	return n, nil
}

// copySparse copies the RAM file src to dst with vmm.CopySparse: only its
// data extents are read and blocks of zeros stay holes, so the gigabytes
// of a guest's RAM it never touched cost nothing to copy. It writes at
// most limit bytes (negative: no bound); past that it fails with
// vmm.ErrSnapshotTooLarge. It returns the RAM file's length.
func copySparse(src, dst string, limit int64) (int64, error) {
	if _, err := vmm.CopySparse(context.Background(), src, dst, limit, false); err != nil {
		return 0, err
	}
	st, err := os.Stat(dst)
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

func readManifest(dir string) (manifest, error) {
	var man manifest
	if err := uds.ReadJSON(filepath.Join(dir, "snapshot.json"), &man); err != nil {
		return manifest{}, fmt.Errorf("%w: %v", vmm.ErrSnapshotInvalid, err)
	}
	if man.Backend != Backend {
		return manifest{}, fmt.Errorf("%w: backend %q, want %q", vmm.ErrSnapshotInvalid, man.Backend, Backend)
	}
	if _, err := os.Stat(filepath.Join(dir, "state")); err != nil {
		return manifest{}, fmt.Errorf("%w: %v", vmm.ErrSnapshotInvalid, err)
	}
	if man.Machine.Disk == "disk.qcow2" {
		if _, err := os.Stat(filepath.Join(dir, "disk.qcow2")); err != nil {
			return manifest{}, fmt.Errorf("%w: %v", vmm.ErrSnapshotInvalid, err)
		}
	}
	if man.Memory == "file" {
		fi, err := os.Stat(filepath.Join(dir, "mem"))
		if err != nil {
			return manifest{}, fmt.Errorf("%w: %v", vmm.ErrSnapshotInvalid, err)
		}
		if fi.Size() != int64(man.Machine.MemoryMiB)<<20 {
			return manifest{}, fmt.Errorf("%w: mem is %d bytes, want %d", vmm.ErrSnapshotInvalid, fi.Size(), int64(man.Machine.MemoryMiB)<<20)
		}
	}
	return man, nil
}
