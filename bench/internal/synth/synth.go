// Package synth builds synthetic NodeInventory objects shaped like the ones
// nodes publish (entries sorted by name, realistic ids, addresses and
// times), so the fleet view can be measured at sizes no machine here can
// boot. It is pure and deterministic: the same arguments give the same
// objects.
package synth

import (
	"fmt"
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/sandbox"
)

// Template is the image every synthetic entry comes from.
const Template = "ghcr.io/cocoonstack/sandbox/rt:24.04"

// Namespaces is how many namespaces the entries are spread over.
const Namespaces = 16

// Epoch is the claim time of every synthetic entry.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// NodeName is the name of synthetic node i.
func NodeName(i int) string { return fmt.Sprintf("node-%04d", i) }

// EntryName is the "ns/name" of the j-th entry of node i.
func EntryName(i, j int) string {
	return fmt.Sprintf("ns-%02d/sbx-%04d-%07d", j%Namespaces, i, j)
}

// EntryID is the claim id of the j-th entry of node i.
func EntryID(i, j int) string { return fmt.Sprintf("sb_%06x%010x", i, j) }

// Node builds node i holding per entries and one warm pool.
func Node(i, per int) *inventory.NodeInventory {
	name := NodeName(i)
	inv := &inventory.NodeInventory{
		TypeMeta: metav1.TypeMeta{APIVersion: inventory.SchemeGroupVersion.String(), Kind: "NodeInventory"},
		Node:     name,
		Address:  fmt.Sprintf("10.%d.%d.%d:7070", i>>16&0xff, i>>8&0xff, i&0xff),
		Pools:    []inventory.Pool{{Template: Template, Net: sandbox.NetNone, Size: sandbox.SizeSmall, Warm: 100, Target: 100}},
		Entries:  make([]inventory.Entry, per),
	}
	inv.Name = name
	inv.ResourceVersion = "1"
	at := metav1.NewTime(Epoch)
	dl := metav1.NewTime(Epoch.Add(time.Hour))
	for j := range inv.Entries {
		n := EntryName(i, j)
		inv.Entries[j] = inventory.Entry{
			Name: n, ID: EntryID(i, j), Phase: sandbox.PhaseRunning, Template: Template, ClaimRef: n,
			AgentAddr: fmt.Sprintf("10.%d.%d.%d:%d", i>>16&0xff, i>>8&0xff, i&0xff, 20000+j%40000),
			Deadline:  &dl, ClaimedAt: &at,
		}
	}
	sort.Slice(inv.Entries, func(a, b int) bool { return inv.Entries[a].Name < inv.Entries[b].Name })
	return inv
}

// Fleet builds nodes nodes of per entries each.
func Fleet(nodes, per int) []*inventory.NodeInventory {
	out := make([]*inventory.NodeInventory, nodes)
	for i := range out {
		out[i] = Node(i, per)
	}
	return out
}

// Split spreads total entries over nodes as evenly as possible.
func Split(nodes, total int) []*inventory.NodeInventory {
	out := make([]*inventory.NodeInventory, nodes)
	for i := range out {
		per := total / nodes
		if i < total%nodes {
			per++
		}
		out[i] = Node(i, per)
	}
	return out
}

// Republish returns a copy of inv as its node would publish it one tick
// later: changed entries (every stride-th, starting at offset) renewed by
// one hour and the resourceVersion bumped. The input is not modified; the
// unchanged entries share their strings with it.
func Republish(inv *inventory.NodeInventory, stride, offset int) *inventory.NodeInventory {
	out := inv.DeepCopy()
	out.ResourceVersion = inv.ResourceVersion + "+"
	if stride <= 0 {
		return out
	}
	for j := offset; j < len(out.Entries); j += stride {
		e := &out.Entries[j]
		dl := metav1.NewTime(e.Deadline.Add(time.Hour))
		e.Deadline = &dl
	}
	return out
}
