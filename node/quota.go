package node

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"
)

// Quota bounds what callers may create beyond the warm pools. A sandbox
// tree is a claimed (or snapshot-started) sandbox and every fork below it;
// a fork child's depth is its parent's plus one. Non-pool VMs are fork
// children and snapshot-started sandboxes. A request over a bound fails
// with 429 and says which bound; nothing is created. Each refusal counts
// in hearth_node_quota_refusals_total{limit}.
type Quota struct {
	// MaxForkDepth is the deepest fork generation below a tree's root.
	MaxForkDepth int
	// MaxTreeChildren is the fork children alive at once in one tree.
	MaxTreeChildren int
	// MaxNodeExtraVMs is the non-pool VMs alive at once on the node.
	MaxNodeExtraVMs int
	// MaxSnapshotBytes is the bytes of snapshots on the node's disk (what
	// they take: allocated blocks, hard links once). A driver is handed
	// what is left (vmm.WithSnapshotLimit) and stops a copy past it.
	MaxSnapshotBytes int64
}

// DefaultQuota: forks of forks but no deeper, 8 children per tree, 64
// non-pool VMs and 20 GiB of snapshots per node.
var DefaultQuota = Quota{MaxForkDepth: 2, MaxTreeChildren: 8, MaxNodeExtraVMs: 64, MaxSnapshotBytes: 20 << 30}

// AddFlags registers the quota flags on fs.
func (q *Quota) AddFlags(fs *flag.FlagSet) {
	fs.IntVar(&q.MaxForkDepth, "max-fork-depth", q.MaxForkDepth, "deepest fork generation below a claimed sandbox (0 = no forks)")
	fs.IntVar(&q.MaxTreeChildren, "max-fork-children", q.MaxTreeChildren, "fork children alive at once per sandbox tree (a claimed sandbox and all its forks)")
	fs.IntVar(&q.MaxNodeExtraVMs, "max-extra-vms", q.MaxNodeExtraVMs, "VMs alive at once on the node beyond the warm pools' (fork children and snapshot-started sandboxes)")
	fs.Int64Var(&q.MaxSnapshotBytes, "max-snapshot-bytes", q.MaxSnapshotBytes, "bytes of snapshots on the node's disk (blocks they take; a snapshot that would pass it is stopped while copying and fails with 429)")
}

// Validate reports every negative bound.
func (q Quota) Validate() []error {
	var errs []error
	if q.MaxForkDepth < 0 || q.MaxTreeChildren < 0 || q.MaxNodeExtraVMs < 0 || q.MaxSnapshotBytes < 0 {
		errs = append(errs, errors.New("--max-fork-depth, --max-fork-children, --max-extra-vms and --max-snapshot-bytes must not be negative"))
	}
	return errs
}

// lineage places a sandbox in its tree: the tree's root id and the fork
// depth below it (0 for the root).
type lineage struct {
	tree  string
	depth int
}

// lineageOf is r's place; a record from before lineages were kept is a root.
func lineageOf(r record) lineage {
	if r.Tree == "" {
		return lineage{tree: r.ID}
	}
	return lineage{tree: r.Tree, depth: r.Depth}
}

// extra reports whether r is a non-pool VM.
func (r record) extra() bool { return r.Depth > 0 || r.Snapshot != "" }

// quotaUse is the node's usage that the quota bounds, reservations of
// operations in flight included. The Node guards it with its mutex.
type quotaUse struct {
	extra int            // non-pool VMs being created
	tree  map[string]int // fork children being created, per tree
}

// checkFork is the quota decision for forking count children below
// parent, free of I/O: the children's lineage or a 429. children is the
// tree's fork children alive (or being created) and extra the node's
// non-pool VMs alive (or being created).
func (q Quota) checkFork(parent lineage, count, children, extra int) (lineage, error) {
	child := lineage{tree: parent.tree, depth: parent.depth + 1}
	switch {
	case child.depth > q.MaxForkDepth:
		return child, refuse(limitForkDepth, "fork depth %d exceeds this node's limit of %d (--max-fork-depth)", child.depth, q.MaxForkDepth)
	case children+count > q.MaxTreeChildren:
		return child, refuse(limitForkChildren, "forking %d would make %d children in this sandbox tree; this node's limit is %d (--max-fork-children)", count, children+count, q.MaxTreeChildren)
	}
	return child, q.checkExtra(count, extra)
}

// checkExtra is the node-wide bound on non-pool VMs.
func (q Quota) checkExtra(count, extra int) error {
	if extra+count > q.MaxNodeExtraVMs {
		return refuse(limitExtraVMs, "%d more non-pool VMs would make %d on this node; its limit is %d (--max-extra-vms)", count, extra+count, q.MaxNodeExtraVMs)
	}
	return nil
}

// checkSnapshotBytes is the node-wide bound on snapshot bytes: used are
// the bytes of the snapshots kept, adding those of a new one.
func (q Quota) checkSnapshotBytes(used, adding int64) error {
	if used+adding > q.MaxSnapshotBytes {
		return refuse(limitSnapshotBytes, "snapshots would take %d bytes on this node; its limit is %d (--max-snapshot-bytes)", used+adding, q.MaxSnapshotBytes)
	}
	return nil
}

// usage counts, under n.mu, the fork children of tree (when not empty)
// and the node's non-pool VMs, reservations included.
func (n *Node) usage(tree string) (children, extra int) {
	for _, sb := range n.tab.byID {
		if !sb.rec.extra() {
			continue
		}
		extra++
		if tree != "" && lineageOf(sb.rec).tree == tree && sb.rec.Depth > 0 {
			children++
		}
	}
	return children + n.quotaUse.tree[tree], extra + n.quotaUse.extra
}

// reserveFork checks the quota for forking count children of parent and
// reserves them until release is called (after the children are recorded
// or the fork failed).
func (n *Node) reserveFork(parent record, count int) (lineage, func(), error) {
	pl := lineageOf(parent)
	n.mu.Lock()
	defer n.mu.Unlock()
	children, extra := n.usage(pl.tree)
	child, err := n.cfg.Quota.checkFork(pl, count, children, extra)
	if err != nil {
		return child, nil, n.counted(err)
	}
	n.quotaUse.extra += count
	n.quotaUse.tree[pl.tree] += count
	return child, func() {
		n.mu.Lock()
		n.quotaUse.extra -= count
		if n.quotaUse.tree[pl.tree] -= count; n.quotaUse.tree[pl.tree] <= 0 {
			delete(n.quotaUse.tree, pl.tree)
		}
		n.mu.Unlock()
	}, nil
}

// reserveExtra checks and reserves count non-pool VMs (snapshot claims).
func (n *Node) reserveExtra(count int) (func(), error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, extra := n.usage("")
	if err := n.cfg.Quota.checkExtra(count, extra); err != nil {
		return nil, n.counted(err)
	}
	n.quotaUse.extra += count
	return func() {
		n.mu.Lock()
		n.quotaUse.extra -= count
		n.mu.Unlock()
	}, nil
}

// snapshotBytes is the bytes of the node's snapshots; call with n.mu held.
func (n *Node) snapshotBytes() int64 {
	var b int64
	for _, s := range n.tab.snapshots {
		b += s.rec.Snapshot.Bytes
	}
	return b
}

// snapshotTooLarge is the 429 of a snapshot the driver stopped copying
// because it would pass the bound (used are the bytes of the snapshots
// kept).
func (q Quota) snapshotTooLarge(used int64) error {
	return refuse(limitSnapshotBytes, "the snapshot would take more than the %d bytes left of this node's limit of %d bytes of snapshots (--max-snapshot-bytes); it was stopped and removed", max(q.MaxSnapshotBytes-used, 0), q.MaxSnapshotBytes)
}

// dirBytes is what the files under dir take on the host's disk: allocated
// blocks (a sparse file counts its data, not its length), each inode once
// (hard links are one file).
func dirBytes(dir string) (int64, error) {
	var total int64
	seen := map[[2]uint64]bool{}
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			total += info.Size()
			return nil
		}
		if id := [2]uint64{uint64(st.Dev), st.Ino}; !seen[id] {
			seen[id] = true
			total += st.Blocks * 512
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("measuring %s: %w", dir, err)
	}
	return total, nil
}

// releaseSnapshots removes the snapshots of sandbox id that are not kept
// (its release); it logs what it cannot remove.
func (n *Node) releaseSnapshots(id string) {
	n.mu.Lock()
	var ids []string
	for sid, s := range n.tab.snapshots {
		if s.rec.Snapshot.SandboxID == id && !s.rec.Snapshot.Kept {
			ids = append(ids, sid)
		}
	}
	n.mu.Unlock()
	for _, sid := range ids {
		if err := n.deleteSnapshot(sid); err != nil && !errors.Is(err, errSnapshotNotFound) {
			n.log.Error(err, "Removing a released sandbox's snapshot", "id", id, "snapshot", sid)
		}
	}
}

// promoteSnapshot keeps snapshot id after its sandbox's release.
func (n *Node) promoteSnapshot(id string) (snapRecord, error) {
	n.mu.Lock()
	c := n.tab.snapshots[id]
	n.mu.Unlock()
	if c == nil {
		return snapRecord{}, errSnapshotNotFound
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone {
		return snapRecord{}, errSnapshotNotFound
	}
	rec := c.rec
	rec.Snapshot.Kept = true
	if err := n.store.putSnapshot(rec); err != nil {
		return snapRecord{}, err
	}
	n.mu.Lock()
	c.rec = rec
	n.mu.Unlock()
	return rec, nil
}
