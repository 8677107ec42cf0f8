package apiserver

import (
	"fmt"
	"net"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/hearthvm/hearth/claim"
	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/sandbox"
)

// splitName splits an entry name "ns/name" at its first "/"; an
// unqualified name is in namespace default.
func splitName(s string) (ns, name string) {
	if i := strings.IndexByte(s, '/'); i >= 0 {
		return s[:i], s[i+1:]
	}
	return "default", s
}

// entryOf turns a live lookup into the entry its node would publish, so
// live reads and view reads synthesize (and hash) alike.
func entryOf(loc claim.Located) inventory.Entry {
	name := loc.ClaimRef
	if name == "" {
		name = "default/" + loc.ID
	}
	phase := sandbox.PhaseRunning
	if loc.Hibernated {
		phase = sandbox.PhaseHibernated
	}
	e := inventory.Entry{Name: name, ID: loc.ID, Phase: phase, Template: loc.Template, ClaimRef: loc.ClaimRef, Addr: loc.Addr}
	if !loc.Deadline.IsZero() {
		t := metav1.NewTime(loc.Deadline.UTC().Truncate(time.Second))
		e.Deadline = &t
	}
	if !loc.ClaimedAt.IsZero() {
		t := metav1.NewTime(loc.ClaimedAt.UTC().Truncate(time.Second))
		e.ClaimedAt = &t
	}
	return e
}

// Labels stamped on a read of e held by node.
func readLabels(node string, e *inventory.Entry) map[string]string {
	l := map[string]string{sandbox.LabelNode: node}
	if e.Phase != "" {
		l[sandbox.LabelPhase] = e.Phase
	}
	if e.ClaimRef != "" {
		_, n := splitName(e.ClaimRef)
		l[sandbox.LabelClaim] = n
	}
	if e.Template != "" {
		l[sandbox.LabelTemplate] = e.Template
	}
	return l
}

// synthesize renders entry e held by node as a Sandbox (CONTRACT §5): labels
// node/phase/claim/template, annotations claim-id/address/deadline,
// creationTimestamp = claim time, status.nodeName, a Ready condition and
// resourceVersion = the entry's content hash.
func synthesize(node string, e *inventory.Entry, hash uint64) *sandboxv1beta1.Sandbox {
	ns, name := splitName(e.Name)
	sb := &sandboxv1beta1.Sandbox{
		TypeMeta: metav1.TypeMeta{APIVersion: sandboxv1beta1.GroupVersion.String(), Kind: "Sandbox"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name,
			Labels:          readLabels(node, e),
			ResourceVersion: fmt.Sprint(hash),
		},
	}
	ann := map[string]string{}
	if e.ID != "" {
		ann[sandbox.AnnotationClaimID] = e.ID
	}
	if e.Addr != "" {
		ann[sandbox.AnnotationAddress] = e.Addr
	}
	if !e.Deadline.IsZero() {
		ann[sandbox.AnnotationDeadline] = e.Deadline.UTC().Format(sandbox.DeadlineFormat)
	}
	if len(ann) > 0 {
		sb.Annotations = ann
	}
	if !e.ClaimedAt.IsZero() {
		sb.CreationTimestamp = *e.ClaimedAt
	}
	sb.Status = status(node, e.Addr, e.Phase)
	return sb
}

func synthesizeItem(it inventory.Item) *sandboxv1beta1.Sandbox {
	return synthesize(it.Node.Name, it.Entry, it.Hash)
}

func synthesizeLocated(loc claim.Located) *sandboxv1beta1.Sandbox {
	e := entryOf(loc)
	return synthesize(loc.Node, &e, inventory.Hash(loc.Node, &e))
}

// status is the synthesized status of a sandbox at addr on node in phase.
func status(node, addr, phase string) sandboxv1beta1.SandboxStatus {
	ready := metav1.ConditionFalse
	if strings.EqualFold(phase, sandbox.PhaseRunning) || strings.EqualFold(phase, "Ready") {
		ready = metav1.ConditionTrue
	}
	reason := phase
	if reason == "" {
		reason = "Unknown"
	}
	st := sandboxv1beta1.SandboxStatus{
		NodeName: node,
		Conditions: []metav1.Condition{{
			Type: "Ready", Status: ready, Reason: reason,
			Message: fmt.Sprintf("phase %q reported by node %q", phase, node),
		}},
	}
	if ip := hostOf(addr); ip != "" {
		st.PodIPs = []string{ip}
	}
	return st
}

func hostOf(addr string) string {
	if addr == "" {
		return ""
	}
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}
