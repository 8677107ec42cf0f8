package node

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/hearthvm/hearth/nodeapi"
)

func TestClaim_ConcurrentClaimsOfOneRefDeliverExactlyOne(t *testing.T) {
	tn := startNode(t, newFakeDriver(), nil)
	if _, err := tn.root.PutPools(bg, pools("img", 6)); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 6)
	const racers = 6
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		won, lost int
	)
	for i := 0; i < racers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/web"})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case nodeapi.StatusOf(err) == 409:
				lost++
			default:
				t.Errorf("claim: %v", err)
			}
		}()
	}
	wg.Wait()
	if won != 1 || lost != racers-1 {
		t.Fatalf("%d claims of one ref won, %d got 409; want exactly one winner", won, lost)
	}
	if got, err := tn.root.GetByRef(bg, "ns/web"); err != nil || len(got) != 1 {
		t.Fatalf("by ref: %v %v", got, err)
	}
	// The losers spent no warm VM.
	info, _ := tn.root.Info(bg)
	if info.Claimed != 1 {
		t.Fatalf("claimed = %d, want 1", info.Claimed)
	}
	// Once released, the name is free again.
	got, _ := tn.root.GetByRef(bg, "ns/web")
	if err := tn.root.Release(bg, got[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/web"}); err != nil {
		t.Fatalf("claim of a released name: %v", err)
	}
}

func TestClaim_RecordsObjectAndLabelsAreMutable(t *testing.T) {
	drv := newFakeDriver()
	dir := t.TempDir()
	cfg := Config{Name: "n1", DataDir: dir, Driver: drv, RootToken: testRoot}
	a := runNode(t, cfg)
	if _, err := a.root.PutPools(bg, pools("img", 2)); err != nil {
		t.Fatal(err)
	}
	a.waitWarm(t, "img", 2)
	obj := nodeapi.Object{Labels: map[string]string{"team": "a"}, Annotations: map[string]string{"note": "x"},
		Spec: json.RawMessage(`{"podTemplate":{"spec":{"containers":[{"name":"c","image":"img"}]}}}`)}
	c, err := a.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/one", Object: obj})
	if err != nil || c.Labels["team"] != "a" || string(c.Spec) != string(obj.Spec) {
		t.Fatalf("claim: %+v %v", c, err)
	}
	// Too big: 413, nothing claimed.
	big := nodeapi.Object{Annotations: map[string]string{"a": strings.Repeat("x", nodeapi.MaxObjectBytes)}}
	if _, err := a.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/big", Object: big}); nodeapi.StatusOf(err) != 413 {
		t.Fatalf("oversized object: %v", err)
	}
	if _, err := a.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/bad", Object: nodeapi.Object{Spec: json.RawMessage(`[1]`)}}); nodeapi.StatusOf(err) != 400 {
		t.Fatalf("spec not an object: %v", err)
	}

	up, err := a.root.SetLabels(bg, c.ID, nodeapi.LabelsRequest{Labels: map[string]string{"team": "b"}, Version: c.Version})
	if err != nil || up.Labels["team"] != "b" || up.Annotations != nil || up.Version != c.Version+1 || string(up.Spec) != string(obj.Spec) {
		t.Fatalf("set labels: %+v %v", up, err)
	}
	if _, err := a.root.SetLabels(bg, c.ID, nodeapi.LabelsRequest{Labels: map[string]string{"team": "c"}, Version: c.Version}); nodeapi.StatusOf(err) != 409 {
		t.Fatalf("stale version: %v", err)
	}
	// The sandbox's own token may set its labels; another's may not.
	own := nodeapi.NewClient(a.srv.URL, c.Token)
	if _, err := own.SetLabels(bg, c.ID, nodeapi.LabelsRequest{Labels: map[string]string{"team": "d"}}); err != nil {
		t.Fatalf("own token: %v", err)
	}
	if e := a.Inventory().Entries[0]; e.Labels["team"] != "d" {
		t.Fatalf("published entry labels %v", e.Labels)
	}
	if err := a.root.Pause(bg, c.ID); err != nil {
		t.Fatal(err)
	}
	a.crash()
	b := runNode(t, cfg)
	got, err := b.root.Get(bg, c.ID)
	if err != nil || got.Labels["team"] != "d" || string(got.Spec) != string(obj.Spec) || !got.Paused || got.Version != c.Version+3 {
		t.Fatalf("after restart: %+v %v", got, err)
	}
	if _, err := b.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/one"}); nodeapi.StatusOf(err) != 409 {
		t.Fatalf("a restarted node forgot the name: %v", err)
	}
}

func TestFork_ChildrenGetValidUniqueNames(t *testing.T) {
	tn := startNode(t, newFakeDriver(), nil)
	if _, err := tn.root.PutPools(bg, pools("img", 2)); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 2)
	// A user sandbox already holds the name of the first child.
	if _, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/p-fork-1"}); err != nil {
		t.Fatal(err)
	}
	p, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/p", Object: nodeapi.Object{Labels: map[string]string{"team": "a"}}})
	if err != nil {
		t.Fatal(err)
	}
	first, err := tn.root.Fork(bg, p.ID, nodeapi.ForkRequest{Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	second, err := tn.root.Fork(bg, p.ID, nodeapi.ForkRequest{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range append(first, second...) {
		got = append(got, c.ClaimRef)
		_, name, _ := strings.Cut(c.ClaimRef, "/")
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Errorf("child name %q: %v", name, errs)
		}
		if c.Labels["team"] != "a" {
			t.Errorf("child %s lost the parent's labels: %v", name, c.Labels)
		}
	}
	if want := "[ns/p-fork-2 ns/p-fork-3 ns/p-fork-4]"; fmt.Sprint(got) != want {
		t.Fatalf("children %v, want %s", got, want)
	}
	long := strings.Repeat("a", 250)
	if n := forkName(long, 12); len(n) > 253 || validation.IsDNS1123Subdomain(n) != nil {
		t.Fatalf("forkName of a long parent: %q", n)
	}
	// A snapshot claim may be named, uniquely.
	snap, err := tn.root.Snapshot(bg, p.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tn.root.ClaimSnapshotAs(bg, snap.ID, nodeapi.SnapshotClaimRequest{ClaimRef: "ns/p"}); nodeapi.StatusOf(err) != 409 {
		t.Fatalf("snapshot claim of a held name: %v", err)
	}
	br, err := tn.root.ClaimSnapshotAs(bg, snap.ID, nodeapi.SnapshotClaimRequest{ClaimRef: "ns/from-snap"})
	if err != nil || br.ClaimRef != "ns/from-snap" {
		t.Fatalf("named snapshot claim: %+v %v", br, err)
	}
}

// A fork child of a sandbox claimed with private traffic is private too,
// in the fork's answer and in a later lookup.
func TestFork_ChildOfAPrivateSandboxIsPrivate(t *testing.T) {
	tn := startNode(t, newFakeDriver(), nil)
	if _, err := tn.root.PutPools(bg, pools("img", 2)); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 2)
	p, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/private", Lifecycle: nodeapi.Lifecycle{PrivateTraffic: true}})
	if err != nil {
		t.Fatal(err)
	}
	if !p.PrivateTraffic {
		t.Fatal("the claim does not report its private traffic")
	}
	kids, err := tn.root.Fork(bg, p.ID, nodeapi.ForkRequest{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(kids) != 1 || !kids[0].PrivateTraffic {
		t.Fatalf("fork child is not private: %+v", kids)
	}
	got, err := tn.root.Get(bg, kids[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if !got.PrivateTraffic {
		t.Fatal("a lookup of the fork child lost its private traffic")
	}
}

// TestClaim_ClaimTimeKeepsMilliseconds: claim times are recorded to the
// millisecond (not whole seconds), so that sandboxes claimed within one
// second order by when they were claimed, and they survive a restart.
func TestClaim_ClaimTimeKeepsMilliseconds(t *testing.T) {
	drv := newFakeDriver()
	var mu sync.Mutex
	clock := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).Add(123456789) // .123456789
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	cfg := Config{Name: "n1", DataDir: t.TempDir(), Driver: drv, RootToken: testRoot, Now: now}
	a := runNode(t, cfg)
	if _, err := a.root.PutPools(bg, pools("img", 2)); err != nil {
		t.Fatal(err)
	}
	a.waitWarm(t, "img", 2)
	first, err := a.root.Claim(bg, nodeapi.ClaimRequest{Template: "img"})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	clock = clock.Add(400 * time.Millisecond) // .523456789, the same second
	mu.Unlock()
	second, err := a.root.Claim(bg, nodeapi.ClaimRequest{Template: "img"})
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Time{time.Date(2026, 12, 1, 10, 0, 0, 123_000_000, time.UTC), time.Date(2026, 12, 1, 10, 0, 0, 523_000_000, time.UTC)}
	for i, c := range []nodeapi.Sandbox{first, second} {
		if !c.ClaimedAt.Equal(want[i]) {
			t.Errorf("claim %d: claimed_at %v, want %v", i, c.ClaimedAt, want[i])
		}
	}
	a.crash()
	b := runNode(t, cfg)
	for i, c := range []nodeapi.Sandbox{first, second} {
		got, err := b.root.Get(bg, c.ID)
		if err != nil || !got.ClaimedAt.Equal(want[i]) {
			t.Errorf("after a restart, claim %d: %v %v, want %v", i, got.ClaimedAt, err, want[i])
		}
	}
}

// TestFork_ChildOfAPublicSandboxIsPublic: an e2b create's public ports
// (Lifecycle.PublicTraffic) carry over to its fork children, as e2b's
// forks keep their parent's network settings; a Kubernetes-created
// parent's children stay private (TestFork_ChildOfAPrivateSandboxIsPrivate).
func TestFork_ChildOfAPublicSandboxIsPublic(t *testing.T) {
	tn := startNode(t, newFakeDriver(), nil)
	if _, err := tn.root.PutPools(bg, pools("img", 2)); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 2)
	for _, public := range []bool{true, false} {
		p, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: fmt.Sprintf("ns/public-%v", public), Lifecycle: nodeapi.Lifecycle{PublicTraffic: public}})
		if err != nil {
			t.Fatal(err)
		}
		kids, err := tn.root.Fork(bg, p.ID, nodeapi.ForkRequest{Count: 1})
		if err != nil {
			t.Fatal(err)
		}
		got, err := tn.root.Get(bg, kids[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.PublicTraffic != public {
			t.Fatalf("parent public %v: fork child public %v", public, got.PublicTraffic)
		}
	}
}

func TestClaim_OversizedMetadataIsRefusedBeforeAnythingIsStored(t *testing.T) {
	drv := newFakeDriver()
	cfg := Config{Name: "n1", DataDir: t.TempDir(), Driver: drv, RootToken: testRoot}
	a := runNode(t, cfg)
	if _, err := a.root.PutPools(bg, pools("img", 2)); err != nil {
		t.Fatal(err)
	}
	a.waitWarm(t, "img", 2)
	manyKeys := make(map[string]string, nodeapi.MaxMetadataKeys+1)
	for i := range nodeapi.MaxMetadataKeys + 1 {
		manyKeys[fmt.Sprintf("k%d", i)] = ""
	}
	for _, c := range []struct {
		name string
		md   map[string]string
		want int
	}{
		{"bytes", map[string]string{"k": strings.Repeat("x", nodeapi.MaxMetadataBytes)}, 413},
		{"keys", manyKeys, 413},
		{"empty key", map[string]string{"": "v"}, 400},
	} {
		ref := "ns/" + strings.ReplaceAll(c.name, " ", "-")
		if _, err := a.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: ref, Metadata: c.md}); nodeapi.StatusOf(err) != c.want {
			t.Errorf("%s: claim answered %v, want %d", c.name, err, c.want)
		}
		if got, _ := a.root.GetByRef(bg, ref); len(got) != 0 {
			t.Errorf("%s: a refused claim is stored under its ref (%d records)", c.name, len(got))
		}
	}
	if info, err := a.root.Info(bg); err != nil || info.Claimed != 0 {
		t.Fatalf("refused claims spent warm VMs: claimed %d (%v)", info.Claimed, err)
	}
	if n := len(a.Inventory().Entries); n != 0 {
		t.Fatalf("refused claims published %d inventory entries", n)
	}
	// At the bound, the claim is delivered and its metadata kept.
	atBound := map[string]string{"k": strings.Repeat("x", nodeapi.MaxMetadataBytes-1)}
	c, err := a.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/at-bound", Metadata: atBound})
	if err != nil || len(c.Metadata["k"]) != nodeapi.MaxMetadataBytes-1 {
		t.Fatalf("claim at the bound: %v", err)
	}
}
