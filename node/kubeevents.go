package node

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/nodeapi"
	sandboxapi "github.com/hearthvm/hearth/sandbox"
)

// A sandbox's lifecycle events also go to the Kubernetes API when the node
// has a client (Config.Events: sandboxd's --kubeconfig or
// --publish-in-cluster, the NodeInventory publisher's), so that `kubectl
// describe sandbox` behind a real kube-apiserver — which serves core/v1
// Events itself, from its etcd — shows them: each event but Claimed, as
// it is recorded, is an events.k8s.io/v1 Event (reportingController
// nodeapi.EventsController) whose regarding is the Sandbox object exactly
// as the aggregated API serves it (kubeObject: its namespace, name and
// uid, inventory.UID), written through internal/kubeevents (a repeat is a
// series, each object has a spam filter's budget; nothing waits on it).
// Claimed is never written: a claim costs etcd nothing. A sandbox without
// a claim ref (an unnamed snapshot claim) has no object of its own name
// and writes none. sandbox-dev sets no Config.Events: its core/v1 Events
// view renders the node's record itself (apiserver/registry.LegacyEvents),
// so an event is never shown twice there.

// kubeEvent writes e, just recorded on r, through n.cfg.Events (see
// above). Call it outside n.mu.
func (n *Node) kubeEvent(r *record, e nodeapi.Event) {
	if n.cfg.Events == nil || e.Reason == nodeapi.ReasonClaimed || r.ClaimRef == "" {
		return
	}
	n.cfg.Events.Eventf(kubeObject(n.cfg.Name, r), e.Type, e.Reason, eventAction(e.Reason), "%s", e.Message)
}

// kubeObject is the reference to claim r of node as the aggregated API
// serves its Sandbox: agents.x-k8s.io/v1beta1 Sandbox, the claim ref's
// namespace (default when it names none) and name, and uid
// inventory.UID(node, id) — what kubectl describe selects events by.
func kubeObject(node string, r *record) *unstructured.Unstructured {
	ns, name := inventory.SplitName(r.ClaimRef)
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(sandboxapi.SchemeGroupVersion.String())
	u.SetKind("Sandbox")
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetUID(inventory.UID(node, r.ID))
	return u
}

// eventAction is an event's action (events.k8s.io/v1 requires one): what
// the node did, or failed to do, to the sandbox.
func eventAction(reason string) string {
	switch reason {
	case nodeapi.ReasonPaused, nodeapi.ReasonLeaseExpired:
		return "Pause"
	case nodeapi.ReasonResumed:
		return "Resume"
	case nodeapi.ReasonForked:
		return "Fork"
	case nodeapi.ReasonSnapshotTaken:
		return "Snapshot"
	case nodeapi.ReasonRestored, nodeapi.ReasonRestoreFailed:
		return "Restore"
	case nodeapi.ReasonOOMKilled:
		return "HealthCheck"
	}
	return reason
}
