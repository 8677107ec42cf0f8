package fleet_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
)

var key = pool.Key{Template: "ghcr.io/x/y:1", Net: "none", Size: "small"}

func TestCandidates_MatchNormalizedKey(t *testing.T) {
	v := inventory.NewView([]*inventory.NodeInventory{
		{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Node: "a", Address: "a:1", Pools: []inventory.Pool{
			{Template: key.Template, Warm: 3},                               // empty net/size normalize to none/small
			{Template: key.Template, Net: "egress", Size: "small", Warm: 9}, // other lane
			{Template: "other", Net: "none", Size: "small", Warm: 9},        // other template
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b"}, Node: "b", Address: "b:1", Pools: []inventory.Pool{
			{Template: key.Template, Net: "none", Size: "small", Warm: 0}, // nothing warm
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Node: "c", Pools: []inventory.Pool{ // no address: not routable
			{Template: key.Template, Net: "none", Size: "small", Warm: 5},
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "d"}, Node: "d", Address: "d:1", Pools: []inventory.Pool{
			{Template: key.Template, Net: "none", Size: "small", Warm: 2},
		}},
	})
	got := fleet.Candidates(v, key)
	want := []fleet.Candidate{{Node: "a", NodeAddr: "a:1", Warm: 3}, {Node: "d", NodeAddr: "d:1", Warm: 2}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("Candidates = %+v, want %+v", got, want)
	}
}

func TestPick(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	if fleet.Pick(nil, r) != -1 {
		t.Fatal("Pick(empty) != -1")
	}
	if fleet.Pick([]fleet.Candidate{{Node: "a", Warm: 1}}, r) != 0 {
		t.Fatal("Pick(single) != 0")
	}
	equal := []fleet.Candidate{{Node: "a", Warm: 5}, {Node: "b", Warm: 5}, {Node: "c", Warm: 5}, {Node: "d", Warm: 5}}
	counts := map[int]int{}
	for i := 0; i < 200; i++ {
		counts[fleet.Pick(equal, r)]++
	}
	for i := range equal {
		if counts[i] == 0 {
			t.Errorf("equally warm node %d got no picks over 200 tries: %v", i, counts)
		}
	}
	skewed := []fleet.Candidate{{Node: "cold", Warm: 1}, {Node: "warm", Warm: 100}}
	warm := 0
	for i := 0; i < 200; i++ {
		if fleet.Pick(skewed, r) == 1 {
			warm++
		}
	}
	if warm <= 130 {
		t.Fatalf("warm 100 vs 1: warm node got %d of 200 picks, want > 130", warm)
	}
	if warm == 200 {
		t.Fatalf("warm node got every pick: not power of two choices")
	}
}

func TestRoute_Outcomes(t *testing.T) {
	ok := nodeapi.Sandbox{ID: "sb_1"}
	dialErr := &net.OpError{Op: "dial", Err: errors.New("refused")}
	timeout := &net.OpError{Op: "read", Err: errors.New("i/o timeout")}
	cases := []struct {
		name    string
		answers map[string]error // per node; nil = delivers
		want    string           // delivering node, or error kind
	}{
		{"first delivers", map[string]error{"a": nil, "b": nil}, "any"},
		{"429 re-samples", map[string]error{"a": &nodeapi.HTTPError{Status: 429}, "b": nil}, "b"},
		{"dial error re-samples", map[string]error{"a": dialErr, "b": nil}, "b"},
		{"5xx re-samples", map[string]error{"a": &nodeapi.HTTPError{Status: 503}, "b": nil}, "b"},
		{"409 fails at once", map[string]error{"a": &nodeapi.HTTPError{Status: 409}, "b": &nodeapi.HTTPError{Status: 409}}, "fail"},
		{"timeout after send fails at once", map[string]error{"a": timeout, "b": timeout}, "fail"},
		{"all 429 is no warm capacity", map[string]error{"a": &nodeapi.HTTPError{Status: 429}, "b": &nodeapi.HTTPError{Status: 429}}, "503"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for seed := uint64(0); seed < 8; seed++ {
				cands := []fleet.Candidate{{Node: "a", NodeAddr: "a", Warm: 1}, {Node: "b", NodeAddr: "b", Warm: 1}}
				tries := 0
				d, err := fleet.Route(context.Background(), key, cands, rand.New(rand.NewPCG(seed, seed)),
					func(_ context.Context, cand fleet.Candidate) (nodeapi.Sandbox, error) {
						tries++
						if e := c.answers[cand.Node]; e != nil {
							return nodeapi.Sandbox{}, e
						}
						return ok, nil
					})
				switch c.want {
				case "any":
					if err != nil || d.ID != "sb_1" {
						t.Fatalf("Route = %+v, %v", d, err)
					}
				case "fail":
					var nw *fleet.ErrNoWarmCapacity
					if err == nil || errors.As(err, &nw) || tries != 1 {
						t.Fatalf("Route = %v after %d tries, want an immediate non-capacity failure", err, tries)
					}
				case "503":
					var nw *fleet.ErrNoWarmCapacity
					if !errors.As(err, &nw) || tries != 2 {
						t.Fatalf("Route = %v after %d tries, want ErrNoWarmCapacity after both", err, tries)
					}
				default:
					if err != nil || d.Node != c.want {
						t.Fatalf("Route = %+v, %v; want delivery from %s", d, err, c.want)
					}
				}
			}
		})
	}
}

func TestRoute_NoCandidatesNamesTheKey(t *testing.T) {
	_, err := fleet.Route(context.Background(), key, nil, rand.New(rand.NewPCG(1, 1)), nil)
	var nw *fleet.ErrNoWarmCapacity
	if !errors.As(err, &nw) {
		t.Fatalf("err = %v, want *ErrNoWarmCapacity", err)
	}
	for _, s := range []string{key.Template, "none", "small"} {
		if !contains(err.Error(), s) {
			t.Errorf("message %q does not name %q", err, s)
		}
	}
	if nodeapi.StatusOf(err) == http.StatusTooManyRequests {
		t.Error("ErrNoWarmCapacity leaks a node 429 status")
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
