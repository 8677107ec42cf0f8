package node

import (
	"net/http"
	"testing"

	"github.com/hearthvm/hearth/nodeapi"
)

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
		// The fake driver's snapshot is one marker file holding the VM id
		// (about 19 bytes): room for two.
		c.Quota = Quota{MaxForkDepth: 2, MaxTreeChildren: 8, MaxNodeExtraVMs: 8, MaxSnapshotBytes: 45}
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
