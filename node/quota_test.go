package node

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/vmmtest"
)

// markerBlock is what the fake driver's marker file takes on the disk of
// the test's temporary directory (one block).
var markerBlock = func() int64 {
	f, err := os.CreateTemp("", "block")
	if err != nil {
		return 4096
	}
	defer os.Remove(f.Name())
	defer f.Close()
	_, _ = f.WriteString("vm-0123456789abcdef")
	_ = f.Sync()
	var st syscall.Stat_t
	if syscall.Fstat(int(f.Fd()), &st) != nil || st.Blocks == 0 {
		return 4096
	}
	return st.Blocks * 512
}()

// boundedDriver is the fake driver honouring vmm.WithSnapshotLimit as a
// real one does: a checkpoint of size bytes that would pass the bound
// fails with vmm.ErrSnapshotTooLarge (after writing, and removing, part
// of it). limits records the bound of every Snapshot (-1: none).
type boundedDriver struct {
	*vmmtest.Driver
	size   int64
	limits chan int64
}

func (d *boundedDriver) Snapshot(ctx context.Context, h vmm.Handle, dir string) error {
	limit := vmm.SnapshotLimit(ctx)
	select {
	case d.limits <- limit:
	default:
	}
	if limit >= 0 && d.size > limit {
		_ = os.MkdirAll(dir, 0o700)
		_ = os.WriteFile(filepath.Join(dir, "partial"), make([]byte, limit), 0o600)
		_ = os.RemoveAll(dir)
		return vmm.ErrSnapshotTooLarge
	}
	return d.Driver.Snapshot(ctx, h, dir)
}

// The driver is handed the node's snapshot budget that is left and stops
// a copy past it: the snapshot fails with 429 naming --max-snapshot-bytes
// and nothing is recorded or left on disk.
func TestSnapshot_DriverStopsAtTheBudgetLeft(t *testing.T) {
	drv := &boundedDriver{Driver: newFakeDriver(), size: 1, limits: make(chan int64, 8)}
	const max = 1 << 20
	tn := startNode(t, drv, func(c *Config) {
		c.Quota = Quota{MaxForkDepth: 2, MaxTreeChildren: 8, MaxNodeExtraVMs: 8, MaxSnapshotBytes: max}
	})
	if _, err := tn.root.PutPools(bg, pools("img", 1)); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 1)
	lastLimit := func() int64 { // of the Snapshot that just returned
		t.Helper()
		select {
		case n := <-drv.limits:
			return n
		default:
			t.Fatal("no snapshot reached the driver")
			return 0
		}
	}
	for len(drv.limits) > 0 {
		<-drv.limits // the golden checkpoint's
	}
	p, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := tn.root.Snapshot(bg, p.ID, "first")
	if err != nil {
		t.Fatal(err)
	}
	if got := lastLimit(); got != max {
		t.Fatalf("the first snapshot's bound is %d, want the whole %d", got, max)
	}
	drv.size = max // more than is left now
	_, err = tn.root.Snapshot(bg, p.ID, "second")
	if nodeapi.StatusOf(err) != http.StatusTooManyRequests || !strings.Contains(err.Error(), "--max-snapshot-bytes") {
		t.Fatalf("a snapshot past the budget: %v, want 429 naming --max-snapshot-bytes", err)
	}
	if got := lastLimit(); got != max-first.Bytes {
		t.Fatalf("the second snapshot's bound is %d, want what is left: %d", got, max-first.Bytes)
	}
	snaps, err := tn.root.Snapshots(bg)
	if err != nil || len(snaps) != 1 {
		t.Fatalf("snapshots after a stopped one: %+v %v", snaps, err)
	}
	ents, _ := os.ReadDir(tn.dirs.snapshots)
	if len(ents) != 1 {
		t.Fatalf("snapshot directories: %v", ents)
	}
}

// A snapshot's bytes are what it takes on the host's disk: a sparse file
// counts its data, hard links count once.
func TestDirBytes_CountsAllocatedBlocksOnce(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, 1<<20), 0); err != nil {
		t.Fatal(err)
	}
	_ = f.Sync()
	f.Close()
	for _, l := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		if err := os.Link(filepath.Join(dir, "sparse"), filepath.Join(dir, l)); err != nil {
			t.Fatal(err)
		}
	}
	n, err := dirBytes(dir)
	if err != nil {
		t.Fatal(err)
	}
	if n < 1<<20 || n > 2<<20 {
		t.Fatalf("dirBytes of a 1 GiB sparse file with 1 MiB of data and 8 names: %d", n)
	}
	if _, err := dirBytes(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("dirBytes of a missing dir: %v", err)
	}
}

func TestQuota_CheckFork(t *testing.T) {
	q := Quota{MaxForkDepth: 2, MaxTreeChildren: 8, MaxNodeExtraVMs: 10}
	root := lineage{tree: "sb_a"}
	for _, tc := range []struct {
		name                   string
		parent                 lineage
		count, children, extra int
		ok                     bool
	}{
		{name: "a root forks", parent: root, count: 8, ok: true},
		{name: "a child forks", parent: lineage{tree: "sb_a", depth: 1}, count: 1, children: 7, ok: true},
		{name: "too deep", parent: lineage{tree: "sb_a", depth: 2}, count: 1},
		{name: "too many children in the tree", parent: root, count: 2, children: 7},
		{name: "too many non-pool VMs on the node", parent: root, count: 2, extra: 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			child, err := q.checkFork(tc.parent, tc.count, tc.children, tc.extra)
			if (err == nil) != tc.ok {
				t.Fatalf("checkFork: %v", err)
			}
			if err != nil && statusOf(err) != http.StatusTooManyRequests {
				t.Fatalf("status %d, want 429", statusOf(err))
			}
			if child.tree != tc.parent.tree || child.depth != tc.parent.depth+1 {
				t.Fatalf("child lineage %+v", child)
			}
		})
	}
}

// A sandbox token cannot fork deeper, wider or more than the caps allow;
// a released child frees its place.
func TestFork_SandboxTokenIsBoundByTheQuota(t *testing.T) {
	tn := startNode(t, newFakeDriver(), func(c *Config) {
		c.Quota = Quota{MaxForkDepth: 2, MaxTreeChildren: 4, MaxNodeExtraVMs: 5, MaxSnapshotBytes: 1 << 30}
	})
	if _, err := tn.root.PutPools(bg, pools("img", 2)); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 2)
	p, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "team/p"})
	if err != nil {
		t.Fatal(err)
	}
	own := nodeapi.NewClient(tn.srv.URL, p.Token)
	kids, err := own.Fork(bg, p.ID, nodeapi.ForkRequest{Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	kid := nodeapi.NewClient(tn.srv.URL, kids[0].Token)
	grand, err := kid.Fork(bg, kids[0].ID, nodeapi.ForkRequest{Count: 2})
	if err != nil {
		t.Fatalf("depth 2: %v", err)
	}
	if _, err := nodeapi.NewClient(tn.srv.URL, grand[0].Token).Fork(bg, grand[0].ID, nodeapi.ForkRequest{Count: 1}); nodeapi.StatusOf(err) != 429 {
		t.Fatalf("depth 3: %v, want 429", err)
	}
	if _, err := own.Fork(bg, p.ID, nodeapi.ForkRequest{Count: 1}); nodeapi.StatusOf(err) != 429 {
		t.Fatalf("a fifth child in the tree: %v, want 429", err)
	}
	// Root is bound by the tree's cap too.
	if _, err := tn.root.Fork(bg, kids[1].ID, nodeapi.ForkRequest{Count: 1}); nodeapi.StatusOf(err) != 429 {
		t.Fatalf("root: a fifth child in the tree: %v, want 429", err)
	}
	if err := tn.root.Release(bg, grand[1].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := own.Fork(bg, p.ID, nodeapi.ForkRequest{Count: 1}); err != nil {
		t.Fatalf("after a release: %v", err)
	}

	// Another tree: the node-wide cap (5 non-pool VMs; 4 are alive).
	q, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "team/q"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tn.root.Fork(bg, q.ID, nodeapi.ForkRequest{Count: 2}); nodeapi.StatusOf(err) != 429 {
		t.Fatalf("over the node's non-pool cap: %v, want 429", err)
	}
	snap, err := tn.root.Snapshot(bg, q.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tn.root.ClaimSnapshot(bg, snap.ID, 0); err != nil {
		t.Fatalf("the fifth non-pool VM: %v", err)
	}
	if _, err := tn.root.ClaimSnapshot(bg, snap.ID, 0); nodeapi.StatusOf(err) != 429 {
		t.Fatalf("a sixth non-pool VM from a snapshot: %v, want 429", err)
	}
}

// Snapshot bytes are capped per node; a sandbox token's snapshots go with
// its sandbox, root's (or promoted ones) stay; only root may keep one.
func TestSnapshot_BytesCapKeepAndRelease(t *testing.T) {
	tn := startNode(t, newFakeDriver(), func(c *Config) {
		// The fake driver's snapshot is a directory holding one marker
		// file: two blocks of the host's disk. Room for two.
		c.Quota = Quota{MaxForkDepth: 2, MaxTreeChildren: 8, MaxNodeExtraVMs: 8, MaxSnapshotBytes: 5 * markerBlock}
	})
	if _, err := tn.root.PutPools(bg, pools("img", 2)); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 2)
	p, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "team/p"})
	if err != nil {
		t.Fatal(err)
	}
	if code, body := rawDo(t, "POST", tn.srv.URL+"/v1/sandboxes/"+p.ID+"/snapshot", p.Token, `{"keep":true}`); code != http.StatusForbidden {
		t.Fatalf("a sandbox token keeping a snapshot: %d %s", code, body)
	}
	own := nodeapi.NewClient(tn.srv.URL, p.Token)
	mine, err := own.Snapshot(bg, p.ID, "mine")
	if err != nil || mine.Kept || mine.Bytes == 0 {
		t.Fatalf("sandbox token's snapshot: %+v %v", mine, err)
	}
	kept, err := tn.root.Snapshot(bg, p.ID, "root's")
	if err != nil || !kept.Kept {
		t.Fatalf("root's snapshot: %+v %v", kept, err)
	}
	if _, err := own.Snapshot(bg, p.ID, "third"); nodeapi.StatusOf(err) != 429 {
		t.Fatalf("over the snapshot bytes cap: %v, want 429", err)
	}
	if err := own.Release(bg, p.ID); err != nil {
		t.Fatal(err)
	}
	snaps, err := tn.root.Snapshots(bg)
	if err != nil || len(snaps) != 1 || snaps[0].ID != kept.ID {
		t.Fatalf("after release, want only the kept snapshot: %+v %v", snaps, err)
	}

	// Promotion: a sandbox token's snapshot promoted by root survives.
	q, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "team/q"})
	if err != nil {
		t.Fatal(err)
	}
	qs, err := nodeapi.NewClient(tn.srv.URL, q.Token).Snapshot(bg, q.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := rawDo(t, "POST", tn.srv.URL+"/v1/snapshots/"+qs.ID+"/promote", q.Token, ""); code != http.StatusForbidden {
		t.Fatalf("a sandbox token promoting: %d", code)
	}
	if got, err := tn.root.PromoteSnapshot(bg, qs.ID); err != nil || !got.Kept {
		t.Fatalf("promote: %+v %v", got, err)
	}
	if err := tn.root.Release(bg, q.ID); err != nil {
		t.Fatal(err)
	}
	if snaps, err := tn.root.Snapshots(bg); err != nil || len(snaps) != 2 {
		t.Fatalf("after releasing a promoted snapshot's sandbox: %+v %v", snaps, err)
	}
}
