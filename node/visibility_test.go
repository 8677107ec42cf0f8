package node

import (
	"testing"

	"github.com/hearthvm/hearth/nodeapi"
	sandboxapi "github.com/hearthvm/hearth/sandbox"
)

// TestE2B_VisibilityIsFixedAtClaim: whether the e2b gateway's keys see a
// sandbox (Lifecycle.E2B) is decided once, when it is claimed — by the
// claim's object carrying sandboxapi.LabelE2B "true" (every e2b create; a
// Kubernetes Create whose object has it), never by a claimer asking for it
// without the label — and a later label change does not change it: a
// holder of `patch sandboxes` cannot label someone else's sandbox into
// e2b (and so read its token through an e2b key), nor out of it. Fork
// children inherit it from their parent, a snapshot records its source's
// at snapshot time, and a sandbox claimed from a snapshot inherits the
// snapshot's, whatever its claimer asks. Lookups, lists and the published
// inventory entry all report it.
func TestE2B_VisibilityIsFixedAtClaim(t *testing.T) {
	tn := startNode(t, newFakeDriver(), nil)
	if _, err := tn.root.PutPools(bg, pools("img", 3)); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 3)
	e2bLabel := map[string]string{sandboxapi.LabelE2B: "true", "team": "a"}

	made, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/e2b-made", Object: nodeapi.Object{Labels: e2bLabel}})
	if err != nil {
		t.Fatal(err)
	}
	kube, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/kubectl-made", Object: nodeapi.Object{Labels: map[string]string{"team": "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	asked, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/asked", Lifecycle: nodeapi.Lifecycle{E2B: true}})
	if err != nil {
		t.Fatal(err)
	}
	if !made.E2B || kube.E2B || asked.E2B {
		t.Fatalf("at claim: labelled %v, unlabelled %v, asked without the label %v; want true, false, false", made.E2B, kube.E2B, asked.E2B)
	}

	// Labels change; visibility does not.
	if _, err := tn.root.SetLabels(bg, kube.ID, nodeapi.LabelsRequest{Labels: map[string]string{sandboxapi.LabelE2B: "true"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := tn.root.SetLabels(bg, made.ID, nodeapi.LabelsRequest{Labels: map[string]string{"team": "a"}}); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{made.ID: true, kube.ID: false, asked.ID: false}
	check := func(when string) {
		t.Helper()
		for id, w := range want {
			got, err := tn.root.Get(bg, id)
			if err != nil {
				t.Fatal(err)
			}
			if got.E2B != w {
				t.Errorf("%s: lookup of %s (%s, labels %v): e2b %v, want %v", when, id, got.ClaimRef, got.Labels, got.E2B, w)
			}
		}
		for _, s := range mustList(t, tn) {
			if w, ok := want[s.ID]; ok && s.E2B != w {
				t.Errorf("%s: list entry %s: e2b %v, want %v", when, s.ClaimRef, s.E2B, w)
			}
		}
		for _, e := range tn.Inventory().Entries {
			if w, ok := want[e.ID]; ok && e.E2B != w {
				t.Errorf("%s: inventory entry %s: e2b %v, want %v", when, e.Name, e.E2B, w)
			}
		}
	}
	check("after relabelling")

	// Fork children inherit it.
	for _, p := range []nodeapi.Sandbox{made, kube} {
		kids, err := tn.root.Fork(bg, p.ID, nodeapi.ForkRequest{Count: 1})
		if err != nil {
			t.Fatal(err)
		}
		want[kids[0].ID] = want[p.ID]
		if kids[0].E2B != want[p.ID] {
			t.Errorf("fork child of %s: e2b %v, want %v", p.ClaimRef, kids[0].E2B, want[p.ID])
		}
	}

	// A snapshot records its source's; a clone inherits the snapshot's,
	// whatever its claimer asks.
	for _, p := range []nodeapi.Sandbox{made, kube} {
		snap, err := tn.root.Snapshot(bg, p.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		if snap.E2B != want[p.ID] {
			t.Errorf("snapshot of %s: e2b %v, want %v", p.ClaimRef, snap.E2B, want[p.ID])
		}
		listed, err := tn.root.Snapshots(bg)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range listed {
			if l.ID == snap.ID && l.E2B != snap.E2B {
				t.Errorf("listed snapshot %s: e2b %v, want %v", l.ID, l.E2B, snap.E2B)
			}
		}
		for _, ask := range []bool{true, false} {
			clone, err := tn.root.ClaimSnapshotAs(bg, snap.ID, nodeapi.SnapshotClaimRequest{Lifecycle: nodeapi.Lifecycle{E2B: ask}})
			if err != nil {
				t.Fatal(err)
			}
			want[clone.ID] = want[p.ID]
			if clone.E2B != want[p.ID] {
				t.Errorf("clone of a snapshot of %s asking e2b %v: e2b %v, want %v", p.ClaimRef, ask, clone.E2B, want[p.ID])
			}
		}
	}
	check("with forks and clones")
}
