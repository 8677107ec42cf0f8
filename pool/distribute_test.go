package pool

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hearthvm/hearth/egress"
)

func TestDistribute(t *testing.T) {
	for _, tc := range []struct {
		name     string
		replicas int32
		nodes    []string
		want     map[string]int32
	}{
		{"no nodes", 5, nil, nil},
		{"zero", 0, []string{"b", "a"}, map[string]int32{"a": 0, "b": 0}},
		{"negative is zero", -3, []string{"a"}, map[string]int32{"a": 0}},
		{"even", 4, []string{"a", "b"}, map[string]int32{"a": 2, "b": 2}},
		{"remainder goes to first names", 5, []string{"c", "a", "b"}, map[string]int32{"a": 2, "b": 2, "c": 1}},
		{"fewer than nodes", 1, []string{"n2", "n1"}, map[string]int32{"n1": 1, "n2": 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, Distribute(tc.replicas, tc.nodes)); d != "" {
				t.Fatalf("-want +got:\n%s", d)
			}
		})
	}
}

func TestDistribute_SumExactSpreadAtMostOne(t *testing.T) {
	var nodes []string
	for i := range 26 {
		nodes = append(nodes, fmt.Sprintf("node-%02d", i))
	}
	for _, r := range []int32{0, 1, 25, 26, 27, 100, 1000} {
		got := Distribute(r, nodes)
		var sum, lo, hi int32 = 0, 1 << 30, -1
		for _, w := range got {
			sum += w
			lo, hi = min(lo, w), max(hi, w)
		}
		if sum != r || hi-lo > 1 {
			t.Fatalf("replicas %d: sum %d spread %d", r, sum, hi-lo)
		}
	}
}

func TestMakePlan(t *testing.T) {
	kA := Key{Template: "img-a", Net: "none", Size: "small"}
	kB := Key{Template: "img-b", Net: "egress", Size: "medium"}
	p1 := Ref{"ns", "p1"}
	p2 := Ref{"ns", "p2"}
	tA := Ref{"ns", "ta"}
	tB := Ref{"ns", "tb"}
	nodes := []string{"n1", "n2"}
	transient := errors.New("etcd timeout")

	for _, tc := range []struct {
		name      string
		pools     []WarmPool
		templates map[Ref]TemplateRead
		last      map[Ref]Key
		wantKeys  map[Ref]Key
		want      map[string][]Target
		problems  []Ref
	}{
		{
			name:      "one pool spread",
			pools:     []WarmPool{{p1, 3, "ta"}},
			templates: map[Ref]TemplateRead{tA: {Key: kA}},
			wantKeys:  map[Ref]Key{p1: kA},
			want:      map[string][]Target{"n1": {{kA, 2}}, "n2": {{kA, 1}}},
		},
		{
			name:      "shared key sums into one entry",
			pools:     []WarmPool{{p1, 3, "ta"}, {p2, 3, "ta"}},
			templates: map[Ref]TemplateRead{tA: {Key: kA}},
			wantKeys:  map[Ref]Key{p1: kA, p2: kA},
			want:      map[string][]Target{"n1": {{kA, 4}}, "n2": {{kA, 2}}},
		},
		{
			name:      "zero replicas keep warm 0 entries, sorted by key",
			pools:     []WarmPool{{p2, 0, "tb"}, {p1, 1, "ta"}},
			templates: map[Ref]TemplateRead{tA: {Key: kA}, tB: {Key: kB}},
			wantKeys:  map[Ref]Key{p1: kA, p2: kB},
			want:      map[string][]Target{"n1": {{kA, 1}, {kB, 0}}, "n2": {{kA, 0}, {kB, 0}}},
		},
		{
			name:      "transient template error keeps the last key",
			pools:     []WarmPool{{p1, 2, "ta"}},
			templates: map[Ref]TemplateRead{tA: {Err: transient}},
			last:      map[Ref]Key{p1: kA},
			wantKeys:  map[Ref]Key{p1: kA},
			want:      map[string][]Target{"n1": {{kA, 1}}, "n2": {{kA, 1}}},
			problems:  []Ref{p1},
		},
		{
			name:      "transient error without a last key provisions nothing",
			pools:     []WarmPool{{p1, 2, "ta"}},
			templates: map[Ref]TemplateRead{tA: {Err: transient}},
			wantKeys:  map[Ref]Key{},
			want:      map[string][]Target{"n1": {}, "n2": {}},
			problems:  []Ref{p1},
		},
		{
			name:      "template not found drains even with a last key",
			pools:     []WarmPool{{p1, 2, "ta"}},
			templates: map[Ref]TemplateRead{},
			last:      map[Ref]Key{p1: kA},
			wantKeys:  map[Ref]Key{},
			want:      map[string][]Target{"n1": {}, "n2": {}},
			problems:  []Ref{p1},
		},
		{
			name:      "invalid template key drains",
			pools:     []WarmPool{{p1, 2, "ta"}},
			templates: map[Ref]TemplateRead{tA: {Err: fmt.Errorf("%w: bad net", ErrInvalidKey)}},
			last:      map[Ref]Key{p1: kA},
			wantKeys:  map[Ref]Key{},
			want:      map[string][]Target{"n1": {}, "n2": {}},
			problems:  []Ref{p1},
		},
		{
			name:      "empty template name",
			pools:     []WarmPool{{p1, 2, ""}},
			templates: map[Ref]TemplateRead{tA: {Key: kA}},
			wantKeys:  map[Ref]Key{},
			want:      map[string][]Target{"n1": {}, "n2": {}},
			problems:  []Ref{p1},
		},
		{
			name:      "template looked up in the pool's namespace",
			pools:     []WarmPool{{Ref{"other", "p"}, 2, "ta"}},
			templates: map[Ref]TemplateRead{tA: {Key: kA}},
			wantKeys:  map[Ref]Key{},
			want:      map[string][]Target{"n1": {}, "n2": {}},
			problems:  []Ref{{"other", "p"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := MakePlan(tc.pools, tc.templates, Plan{Keys: tc.last}, nodes)
			if d := cmp.Diff(tc.wantKeys, p.Keys); d != "" {
				t.Errorf("keys -want +got:\n%s", d)
			}
			if d := cmp.Diff(tc.want, p.Targets); d != "" {
				t.Errorf("targets -want +got:\n%s", d)
			}
			var got []Ref
			for _, wp := range tc.pools {
				if p.Problems[wp.Ref] != nil {
					got = append(got, wp.Ref)
				}
			}
			if d := cmp.Diff(tc.problems, got); d != "" {
				t.Errorf("problems -want +got:\n%s", d)
			}
		})
	}
}

func TestObserved(t *testing.T) {
	kA := Key{Template: "a", Net: "none", Size: "small"}
	kB := Key{Template: "b", Net: "none", Size: "small"}
	p1, p2, p3 := Ref{"ns", "p1"}, Ref{"ns", "p2"}, Ref{"ns", "p3"}
	pools := []WarmPool{{Ref: p1}, {Ref: p2}, {Ref: p3}}
	warm := map[string]map[Key]int32{
		"n1": {kA: 7, kB: 1},
		"n2": {kA: 7},
	}
	got := Observed(pools, map[Ref]Key{p1: kA, p2: kB}, warm)
	want := map[Ref]int32{p1: 14, p2: 1, p3: 0}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("-want +got:\n%s", d)
	}
}

// BenchmarkMakePlan: 200 pools over 100 nodes, the per-tick decision.
func BenchmarkMakePlan(b *testing.B) {
	var nodes []string
	for i := range 100 {
		nodes = append(nodes, fmt.Sprintf("node-%03d", i))
	}
	templates := map[Ref]TemplateRead{}
	var pools []WarmPool
	for i := range 200 {
		t := Ref{"ns", fmt.Sprintf("t%d", i%50)}
		templates[t] = TemplateRead{Key: Key{Template: t.Name, Net: "none", Size: "small"}}
		pools = append(pools, WarmPool{Ref: Ref{"ns", fmt.Sprintf("p%d", i)}, Replicas: int32(i * 7), Template: t.Name})
	}
	b.ReportAllocs()
	for b.Loop() {
		MakePlan(pools, templates, Plan{}, nodes)
	}
}

// One key, one policy: a key's warm VMs carry the policy of the oldest
// template that provisions it; a template that would hold the same key to
// another policy provisions nothing (and cannot loosen the older one's).
func TestMakePlan_EgressOneKeyOnePolicyTheOldestTemplateHoldsIt(t *testing.T) {
	k := Key{Template: "img", Net: "egress", Size: "small"}
	kNone := Key{Template: "img", Net: "none", Size: "small"}
	p1, p2, p3 := Ref{"ns", "p1"}, Ref{"ns", "p2"}, Ref{"other", "p3"}
	t1, t2, t3 := Ref{"ns", "t1"}, Ref{"ns", "t2"}, Ref{"other", "t3"}
	strict := egress.Default()
	open := &egress.Policy{Otherwise: egress.Allow}
	old, young := time.Unix(100, 0), time.Unix(200, 0)
	transient := errors.New("etcd timeout")
	nodes := []string{"n1"}

	for _, tc := range []struct {
		name      string
		pools     []WarmPool
		templates map[Ref]TemplateRead
		last      Plan
		wantKeys  map[Ref]Key
		wantPol   map[Key]*egress.Policy
		conflict  []Ref
	}{
		{
			name:      "a template's policy is its key's",
			pools:     []WarmPool{{p1, 1, "t1"}},
			templates: map[Ref]TemplateRead{t1: {Key: k, Egress: strict, Created: old}},
			wantKeys:  map[Ref]Key{p1: k},
			wantPol:   map[Key]*egress.Policy{k: strict},
		},
		{
			name:  "two templates with one key and one policy share it",
			pools: []WarmPool{{p1, 1, "t1"}, {p2, 1, "t2"}},
			templates: map[Ref]TemplateRead{
				t1: {Key: k, Egress: egress.Default(), Created: old},
				t2: {Key: k, Egress: egress.Default(), Created: young}},
			wantKeys: map[Ref]Key{p1: k, p2: k},
			wantPol:  map[Key]*egress.Policy{k: strict},
		},
		{
			name:  "a younger template with a looser policy gets nothing, in any order and namespace",
			pools: []WarmPool{{p3, 1, "t3"}, {p1, 1, "t1"}},
			templates: map[Ref]TemplateRead{
				t1: {Key: k, Egress: strict, Created: old},
				t3: {Key: k, Egress: open, Created: young}},
			wantKeys: map[Ref]Key{p1: k},
			wantPol:  map[Key]*egress.Policy{k: strict},
			conflict: []Ref{p3},
		},
		{
			name:  "a younger template with no policy (Unmanaged) gets nothing",
			pools: []WarmPool{{p2, 1, "t2"}, {p1, 1, "t1"}},
			templates: map[Ref]TemplateRead{
				t1: {Key: k, Egress: strict, Created: young},
				t2: {Key: k, Created: old}},
			wantKeys: map[Ref]Key{p2: k},
			wantPol:  map[Key]*egress.Policy{},
			conflict: []Ref{p1},
		},
		{
			name:  "same age: the least namespace/name holds the key",
			pools: []WarmPool{{p2, 1, "t2"}, {p1, 1, "t1"}},
			templates: map[Ref]TemplateRead{
				t1: {Key: k, Egress: strict, Created: old},
				t2: {Key: k, Egress: open, Created: old}},
			wantKeys: map[Ref]Key{p1: k},
			wantPol:  map[Key]*egress.Policy{k: strict},
			conflict: []Ref{p2},
		},
		{
			name:  "different keys never conflict",
			pools: []WarmPool{{p1, 1, "t1"}, {p2, 1, "t2"}},
			templates: map[Ref]TemplateRead{
				t1: {Key: k, Egress: strict, Created: young},
				t2: {Key: kNone, Created: old}},
			wantKeys: map[Ref]Key{p1: k, p2: kNone},
			wantPol:  map[Key]*egress.Policy{k: strict},
		},
		{
			name:      "an invalid policy drains, even with a last key",
			pools:     []WarmPool{{p1, 1, "t1"}},
			templates: map[Ref]TemplateRead{t1: {Err: fmt.Errorf("%w: spec.networkPolicy.egress[0].to[0]: Forbidden", ErrInvalidEgress)}},
			last:      Plan{Keys: map[Ref]Key{p1: k}, Egress: map[Key]*egress.Policy{k: strict}},
			wantKeys:  map[Ref]Key{},
			wantPol:   map[Key]*egress.Policy{},
		},
		{
			name:      "a transient error keeps the last key and its policy",
			pools:     []WarmPool{{p1, 1, "t1"}},
			templates: map[Ref]TemplateRead{t1: {Err: transient}},
			last:      Plan{Keys: map[Ref]Key{p1: k}, Egress: map[Key]*egress.Policy{k: strict}},
			wantKeys:  map[Ref]Key{p1: k},
			wantPol:   map[Key]*egress.Policy{k: strict},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := MakePlan(tc.pools, tc.templates, tc.last, nodes)
			if d := cmp.Diff(tc.wantKeys, p.Keys); d != "" {
				t.Errorf("keys -want +got:\n%s", d)
			}
			if d := cmp.Diff(tc.wantPol, p.Egress); d != "" {
				t.Errorf("egress -want +got:\n%s", d)
			}
			var got []Ref
			for _, wp := range tc.pools {
				if errors.Is(p.Problems[wp.Ref], ErrEgressConflict) {
					got = append(got, wp.Ref)
				}
			}
			if d := cmp.Diff(tc.conflict, got); d != "" {
				t.Errorf("conflicts -want +got:\n%s", d)
			}
		})
	}
}
