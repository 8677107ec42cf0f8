package sim

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/hearthvm/hearth/vmm"
)

var _ vmm.OOMCounter = (*Driver)(nil)

// OOMKills implements vmm.OOMCounter: the oom_kill counter of h's memory
// cgroup (v1 memory.oom_control, v2 memory.events), the processes the
// kernel killed because the VM reached its size class's memory limit. The
// cgroup is made anew when the VM's processes start (boot, clone, a
// Restore that restarts it), so the count starts from 0 then.
func (d *Driver) OOMKills(ctx context.Context, h vmm.Handle) (uint64, error) {
	dir, err := d.dirOf(h)
	if err != nil {
		return 0, err
	}
	r, err := readRecord(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("%w: %s", vmm.ErrNotRunning, h.ID)
	}
	if err != nil {
		return 0, fmt.Errorf("sim: %s: reading its state: %w", h.ID, err)
	}
	if owned, err := d.owns(r); err != nil {
		return 0, err
	} else if !owned {
		return 0, fmt.Errorf("%w: %s", vmm.ErrNotRunning, h.ID)
	}
	n, err := d.cgroupOf(r).oomKills()
	if err != nil {
		return 0, fmt.Errorf("sim: %s: %w", h.ID, err)
	}
	return n, nil
}

// oomKills reads the cgroup's oom_kill counter.
func (c vmCgroup) oomKills() (uint64, error) {
	f := "memory.oom_control"
	if c.v2 {
		f = "memory.events"
	}
	p := filepath.Join(c.ctl("memory"), f)
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	n, ok := parseOOMKill(b)
	if !ok {
		return 0, fmt.Errorf("%s has no oom_kill counter", p)
	}
	return n, nil
}

// parseOOMKill returns the value of the "oom_kill N" line of a cgroup's
// memory.oom_control (v1) or memory.events (v2), both "key value" lines;
// ok is false when there is no such line or its value is not a count
// (a v1 kernel older than 4.13 has none).
func parseOOMKill(b []byte) (n uint64, ok bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, found := bytes.Cut(bytes.TrimSpace(sc.Bytes()), []byte(" "))
		if !found || string(k) != "oom_kill" {
			continue
		}
		n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
		if err != nil {
			return 0, false
		}
		return n, true
	}
	return 0, false
}
