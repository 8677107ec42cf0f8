package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Orphaned guests. A VM outlives its node on purpose (a restarted node
// re-adopts it), but when the node's root directory is deleted while the
// node is down, no driver ever scans that root again and its guests would
// run forever. Every driver therefore registers its root on the host: the
// file <registryDir>/<cgroup parent>/<root key> holds the root's path and is
// share-locked (flock) for as long as the driver's process lives. New
// sweeps the cgroups under the parent: a cgroup <key>-<id> of another key
// is an orphan when nobody holds that key's lock (no live driver), its root
// is known — from the registry file or, for guests started before the
// registry, from the log file the VM's init writes to (fd 1) — and hashes
// to the key, and that root no longer exists (ENOENT; any other error
// proves nothing). Orphans are killed and their cgroups removed, and
// whatever is still mounted under the root (their disks, with the loop
// devices they hold) is unmounted. A guest whose root cannot be
// established is left alone.

// registryDir holds the drivers' registrations (tmpfs: it lives exactly as
// long as the cgroups it describes).
var registryDir = "/run/hearth-sim"

// cgroupName is a VM cgroup's name under the parent: <root key>-<vm id>.
var cgroupName = regexp.MustCompile(`^([0-9a-f]{8})-([A-Za-z0-9][A-Za-z0-9_.-]{0,127})$`)

// rootKey is the short hash of a driver root that prefixes its cgroups.
func rootKey(root string) string {
	sum := sha256.Sum256([]byte(root))
	return hex.EncodeToString(sum[:4])
}

// register share-locks this driver's registry file and writes its root
// into it; the lock is held (the file left open) for the process's life.
func (d *Driver) register() error {
	dir := filepath.Join(registryDir, d.cgParent)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	path := filepath.Join(dir, d.rootKey)
	deadline := time.Now().Add(30 * time.Second)
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
			f.Close()
			if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
				return fmt.Errorf("locking %s: %w", path, err)
			}
			time.Sleep(10 * time.Millisecond) // a sweep of this key holds it
			continue
		}
		// A sweep may have removed the file between our open and lock.
		var a, b unix.Stat_t
		if unix.Fstat(int(f.Fd()), &a) != nil || unix.Stat(path, &b) != nil || a.Ino != b.Ino || a.Dev != b.Dev {
			f.Close()
			continue
		}
		if err := os.WriteFile(path, []byte(d.root+"\n"), 0o600); err != nil {
			f.Close()
			return err
		}
		d.registration = f
		return nil
	}
}

// orphanCandidates returns the VM cgroups under parent (their paths relative
// to the hierarchies' root), grouped by root key.
func orphanCandidates(parent string) map[string][]vmCgroup {
	base := filepath.Join(cgroupRoot, parent)
	if !cgroupV2() {
		base = filepath.Join(cgroupRoot, "freezer", parent)
	}
	ents, err := os.ReadDir(base)
	if err != nil {
		return nil
	}
	out := map[string][]vmCgroup{}
	for _, e := range ents {
		m := cgroupName.FindStringSubmatch(e.Name())
		if !e.IsDir() || m == nil {
			continue
		}
		out[m[1]] = append(out[m[1]], newCgroup(parent+"/"+e.Name()))
	}
	return out
}

// rootOfGuest recovers a VM's root from the log file its processes write
// to (<root>/<id>/<logFile>), or "" when none does.
func rootOfGuest(cg vmCgroup, id string) string {
	for _, pid := range cg.procs() {
		for _, fd := range []int{1, 2} {
			p, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", pid, fd))
			if err != nil {
				continue
			}
			p = strings.TrimSuffix(p, " (deleted)")
			if filepath.Base(p) == logFile && filepath.Base(filepath.Dir(p)) == id {
				return filepath.Dir(filepath.Dir(p))
			}
		}
	}
	return ""
}

// SweepOrphans kills and removes the guests of other drivers under this
// driver's cgroup parent whose root is gone and no live driver owns (see
// above). New calls it; a node may call it again at any time. It returns
// the cgroups it removed.
func (d *Driver) SweepOrphans() ([]string, error) {
	var removed []string
	var errs []error
	for key, cgs := range orphanCandidates(d.cgParent) {
		if key == d.rootKey {
			continue // ours: our root exists and scan handles its VMs
		}
		out, err := d.sweepKey(key, cgs)
		removed = append(removed, out...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return removed, errors.Join(errs...)
}

// sweepKey removes the cgroups cgs of root key when they are orphans,
// holding the key's registry lock exclusively meanwhile.
func (d *Driver) sweepKey(key string, cgs []vmCgroup) ([]string, error) {
	dir := filepath.Join(registryDir, d.cgParent)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, key)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, nil // a live driver owns the key
		}
		return nil, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	root := strings.TrimSpace(string(b))
	if root == "" {
		for _, cg := range cgs {
			if root = rootOfGuest(cg, strings.TrimPrefix(filepath.Base(cg.rel), key+"-")); root != "" {
				break
			}
		}
	}
	if root == "" || rootKey(root) != key {
		if len(b) == 0 {
			_ = os.Remove(path) // what we created to lock
		}
		return nil, nil // unknown owner: never kill
	}
	if _, err := os.Stat(root); !errors.Is(err, fs.ErrNotExist) {
		return nil, err // the root exists (or cannot be checked): not an orphan
	}
	var removed []string
	var errs []error
	for _, cg := range cgs {
		if err := cg.kill(); err != nil {
			errs = append(errs, fmt.Errorf("sim: killing orphan cgroup %s: %w", cg.rel, err))
			continue
		}
		if err := cg.remove(); err != nil {
			errs = append(errs, fmt.Errorf("sim: removing orphan cgroup %s: %w", cg.rel, err))
			continue
		}
		d.log.Info("Removed the guests of a deleted root", "cgroup", cg.rel, "root", root)
		removed = append(removed, cg.rel)
	}
	// The guests' disks and roots: mounts left under the deleted root
	// (its loop devices go with them).
	if err := unmountUnder(root); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		_ = os.Remove(path) // still locked: a registering driver re-checks the inode
	}
	return removed, errors.Join(errs...)
}
