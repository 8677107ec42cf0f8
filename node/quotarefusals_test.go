package node

import (
	"strings"
	"testing"

	"github.com/hearthvm/hearth/nodeapi"
)

// Every 429 of the quota counts once in hearth_node_quota_refusals_total
// under the bound it reached; a claim with no warm VM (also 429) is not a
// quota refusal.
func TestQuotaRefusals_CountedByLimit(t *testing.T) {
	tn := startNode(t, newFakeDriver(), func(c *Config) {
		c.Quota = Quota{MaxForkDepth: 1, MaxTreeChildren: 2, MaxNodeExtraVMs: 3, MaxSnapshotBytes: 1 << 30}
	})
	if _, err := tn.root.PutPools(bg, pools("img", 2)); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 2)
	p, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "team/p"})
	if err != nil {
		t.Fatal(err)
	}
	kids, err := tn.root.Fork(bg, p.ID, nodeapi.ForkRequest{Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tn.root.Fork(bg, kids[0].ID, nodeapi.ForkRequest{Count: 1}); nodeapi.StatusOf(err) != 429 {
		t.Fatalf("depth 2: %v, want 429", err)
	}
	if _, err := tn.root.Fork(bg, p.ID, nodeapi.ForkRequest{Count: 1}); nodeapi.StatusOf(err) != 429 {
		t.Fatalf("a third child: %v, want 429", err)
	}
	q, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "team/q"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tn.root.Fork(bg, q.ID, nodeapi.ForkRequest{Count: 2}); nodeapi.StatusOf(err) != 429 {
		t.Fatalf("over the node's non-pool cap by fork: %v, want 429", err)
	}
	snap, err := tn.root.Snapshot(bg, q.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tn.root.ClaimSnapshot(bg, snap.ID, 0); err != nil {
		t.Fatalf("the third non-pool VM: %v", err)
	}
	if _, err := tn.root.ClaimSnapshot(bg, snap.ID, 0); nodeapi.StatusOf(err) != 429 {
		t.Fatalf("a fourth non-pool VM from a snapshot: %v, want 429", err)
	}
	if _, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "absent", ClaimRef: "team/r"}); nodeapi.StatusOf(err) != 429 {
		t.Fatalf("a claim of a template without warm VMs: %v, want 429", err)
	}
	_, body := rawDo(t, "GET", tn.srv.URL+"/metrics", "", "")
	for _, want := range []string{
		`hearth_node_quota_refusals_total{limit="fork_depth"} 1`,
		`hearth_node_quota_refusals_total{limit="fork_children"} 1`,
		`hearth_node_quota_refusals_total{limit="extra_vms"} 2`,
		`hearth_node_quota_refusals_total{limit="snapshot_bytes"} 0`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("metrics: no %q in\n%s", want, grepLines(body, "hearth_node_quota_refusals_total"))
		}
	}
}
