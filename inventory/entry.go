package inventory

import (
	"strings"
	"time"

	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/sandbox"
)

// NameOf is the entry name of a sandbox: its claim ref, or
// "default/<id>" with the id made a DNS label (nodeapi.DNSName: "sb_1" →
// "sb-1") for a sandbox without one (an unnamed snapshot claim), so that
// every name a read renders is a valid object name.
func NameOf(s *nodeapi.Sandbox) string {
	if s.ClaimRef != "" {
		return s.ClaimRef
	}
	return "default/" + nodeapi.DNSName(s.ID)
}

// SplitName splits an entry name (a claim ref, NameOf) "ns/name" at its
// first "/": the Sandbox object's namespace and name; an unqualified name
// is in namespace default. The node names the object its Kubernetes
// Events regard with it, as every read does.
func SplitName(s string) (ns, name string) {
	if i := strings.IndexByte(s, '/'); i >= 0 {
		return s[:i], s[i+1:]
	}
	return "default", s
}

// uidSpace is the namespace of the name-based sandbox uids.
var uidSpace = uuid.MustParse("3d0f6c52-8a4b-4e57-9b1e-7c2a9f64d0b3")

// UID is the metadata.uid of the Sandbox object of claim id on node: a
// name-based (SHA-1) UUID of both, so every read on every API server
// replica, before and after a node restart, renders the same uid, a new
// claim of the same name gets a new one, and the node itself names the
// object its Kubernetes Events regard with the uid the API serves. Empty
// for an empty id.
func UID(node, id string) types.UID {
	if id == "" {
		return ""
	}
	return types.UID(uuid.NewSHA1(uidSpace, []byte(node+"/"+id)).String())
}

// PhaseOf is the phase a node reports: Paused or Running.
func PhaseOf(s *nodeapi.Sandbox) string {
	if s.Paused {
		return sandbox.PhasePaused
	}
	return sandbox.PhaseRunning
}

// EntryOf is the one conversion of a sandbox record into the entry its
// node publishes; a live lookup converted here hashes like the published
// entry. The deadline is kept to whole seconds, the claim time to
// milliseconds (what a change stream carries; a published NodeInventory's
// metav1.Time carries whole seconds, and Hash counts whole seconds, so
// both forms hash alike). The metadata is kept (the change stream's
// form); a node leaves it out of what it publishes (Entry.Metadata). Hash
// counts neither it nor net and size (all fixed at claim).
func EntryOf(s *nodeapi.Sandbox) Entry {
	e := Entry{Name: NameOf(s), ID: s.ID, Phase: PhaseOf(s), Template: s.Template, Net: s.Net, Size: s.Size, ClaimRef: s.ClaimRef, AgentAddr: s.AgentAddr,
		Labels: s.Labels, Annotations: s.Annotations, E2B: s.E2B, Metadata: s.Metadata}
	if !s.Deadline.IsZero() {
		t := metav1.NewTime(s.Deadline.UTC().Truncate(time.Second))
		e.Deadline = &t
	}
	if !s.ClaimedAt.IsZero() {
		t := metav1.NewTime(s.ClaimedAt.UTC().Truncate(time.Millisecond))
		e.ClaimedAt = &t
	}
	return e
}

// Sandbox is the record an item stands for, located on its node. What an
// entry does not carry (token, spec, managed fields, version, the
// lifecycle but its e2b visibility; metadata when the entry was read from
// a published object) is empty: the holding node's record has it.
func (it Item) Sandbox() nodeapi.Sandbox {
	e := it.Entry
	s := nodeapi.Sandbox{ID: e.ID, Node: it.Node.Name, NodeAddr: it.Node.Address, Template: e.Template, Net: e.Net, Size: e.Size,
		ClaimRef: e.ClaimRef, AgentAddr: e.AgentAddr, Paused: e.Phase == sandbox.PhasePaused,
		Metadata: e.Metadata, Object: nodeapi.Object{Labels: e.Labels, Annotations: e.Annotations}, Lifecycle: nodeapi.Lifecycle{E2B: e.E2B}}
	if e.Deadline != nil {
		s.Deadline = e.Deadline.Time
	}
	if e.ClaimedAt != nil {
		s.ClaimedAt = e.ClaimedAt.Time
	}
	return s
}
