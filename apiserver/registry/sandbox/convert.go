package sandboxstore

import (
	"encoding/json"
	"fmt"
	"net"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/sandbox"
)

// stampedLabels and stampedAnnotations are the keys a read stamps: they
// win over the user's keys of the same name, which are never recorded.
var (
	stampedLabels      = map[string]bool{sandbox.LabelNode: true, sandbox.LabelPhase: true, sandbox.LabelClaim: true, sandbox.LabelTemplate: true}
	stampedAnnotations = map[string]bool{sandbox.AnnotationClaimID: true, sandbox.AnnotationAddress: true, sandbox.AnnotationDeadline: true, sandbox.AnnotationToken: true}
)

// userPart returns m without the stamped keys; nil when nothing is left.
func userPart(m map[string]string, stamped map[string]bool) map[string]string {
	var out map[string]string
	for k, v := range m {
		if stamped[k] {
			continue
		}
		if out == nil {
			out = make(map[string]string, len(m))
		}
		out[k] = v
	}
	return out
}

// uidOf is a sandbox's metadata.uid (inventory.UID of its node and claim
// id): the same on every read, and the one its node's Events regard.
func uidOf(s *nodeapi.Sandbox) types.UID { return inventory.UID(s.Node, s.ID) }

// recordedSpec is what Create records of a spec: all of it except the live
// state a read renders from the claim (operatingMode, shutdownTime).
func recordedSpec(sp sandboxv1beta1.SandboxSpec) sandboxv1beta1.SandboxSpec {
	sp.OperatingMode = ""
	sp.ShutdownTime = nil
	return sp
}

// specOf renders s's spec: the recorded spec, operatingMode from the
// node's phase and shutdownTime the lease's deadline.
func specOf(s *nodeapi.Sandbox) sandboxv1beta1.SandboxSpec {
	var sp sandboxv1beta1.SandboxSpec
	if len(s.Spec) > 0 {
		_ = json.Unmarshal(s.Spec, &sp) // recorded by Create; one that does not decode renders empty
	}
	sp = recordedSpec(sp)
	sp.OperatingMode = sandboxv1beta1.SandboxOperatingModeRunning
	if s.Paused {
		sp.OperatingMode = sandboxv1beta1.SandboxOperatingModeSuspended
	}
	if !s.Deadline.IsZero() {
		t := metav1.NewTime(s.Deadline.UTC().Truncate(time.Second))
		sp.ShutdownTime = &t
	}
	return sp
}

// readLabels are the labels of a read of s: the user's, then the stamped
// node/phase/claim/template, which win.
func readLabels(s *nodeapi.Sandbox) map[string]string {
	l := make(map[string]string, len(s.Labels)+4)
	for k, v := range s.Labels {
		l[k] = v
	}
	l[sandbox.LabelNode], l[sandbox.LabelPhase] = s.Node, inventory.PhaseOf(s)
	if s.ClaimRef != "" {
		_, n := inventory.SplitName(s.ClaimRef)
		l[sandbox.LabelClaim] = n
	}
	if s.Template != "" {
		l[sandbox.LabelTemplate] = s.Template
	}
	return l
}

// synthesize renders the one sandbox record as a Sandbox (docs/API.md#get):
// uid (uidOf), the user's labels and annotations with the stamped labels
// node/phase/claim/template and annotations claim-id/address/deadline
// winning, the recorded spec with operatingMode and shutdownTime from the
// claim (specOf), the recorded managedFields, creationTimestamp = claim
// time, status.nodeName, a Ready condition (and Suspended when paused) and
// resourceVersion rv, a revision of the live source (read). The token is
// never rendered here (Create adds it).
// A view entry has no spec beyond the live state, nor managedFields.
func synthesize(s *nodeapi.Sandbox, rv uint64) *sandboxv1beta1.Sandbox {
	ns, name := inventory.SplitName(inventory.NameOf(s))
	sb := &sandboxv1beta1.Sandbox{
		TypeMeta: metav1.TypeMeta{APIVersion: sandboxv1beta1.GroupVersion.String(), Kind: "Sandbox"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name,
			UID:             uidOf(s),
			Labels:          readLabels(s),
			ResourceVersion: rvString(rv),
		},
		Spec: specOf(s),
	}
	if len(s.ManagedFields) > 0 {
		_ = json.Unmarshal(s.ManagedFields, &sb.ManagedFields)
	}
	ann := make(map[string]string, len(s.Annotations)+3)
	for k, v := range s.Annotations {
		ann[k] = v
	}
	if s.ID != "" {
		ann[sandbox.AnnotationClaimID] = s.ID
	}
	if s.AgentAddr != "" {
		ann[sandbox.AnnotationAddress] = s.AgentAddr
	}
	if !s.Deadline.IsZero() {
		ann[sandbox.AnnotationDeadline] = s.Deadline.UTC().Format(sandbox.DeadlineFormat)
	}
	if len(ann) > 0 {
		sb.Annotations = ann
	}
	if !s.ClaimedAt.IsZero() {
		sb.CreationTimestamp = metav1.NewTime(s.ClaimedAt.UTC().Truncate(time.Second))
	}
	sb.Status = status(s)
	return sb
}

// status is the synthesized status of s: its node, its agent's IP and the
// upstream Ready condition (DependenciesReady when running, SandboxSuspended
// when paused), plus upstream's Suspended condition when paused.
func status(s *nodeapi.Sandbox) sandboxv1beta1.SandboxStatus {
	ready, reason := metav1.ConditionTrue, sandboxv1beta1.SandboxReasonDependenciesReady
	if s.Paused {
		ready, reason = metav1.ConditionFalse, sandboxv1beta1.SandboxReasonSuspended
	}
	st := sandboxv1beta1.SandboxStatus{
		NodeName: s.Node,
		Conditions: []metav1.Condition{{
			Type: string(sandboxv1beta1.SandboxConditionReady), Status: ready, Reason: reason,
			Message: fmt.Sprintf("phase %q reported by node %q", inventory.PhaseOf(s), s.Node),
		}},
	}
	if s.Paused {
		st.Conditions = append(st.Conditions, metav1.Condition{
			Type: string(sandboxv1beta1.SandboxConditionSuspended), Status: metav1.ConditionTrue,
			Reason:  sandboxv1beta1.SandboxReasonSuspended,
			Message: fmt.Sprintf("the microVM is paused on node %q", s.Node),
		})
	}
	if ip := hostOf(s.AgentAddr); ip != "" {
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
