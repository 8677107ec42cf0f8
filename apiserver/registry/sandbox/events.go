package sandboxstore

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/nodeapi"
)

// EventsController is the reportingController of a sandbox's events
// (nodeapi.EventsController): its node records them (nodeapi.Sandbox.Events)
// and, on a cluster, writes them but Claimed to the kube-apiserver.
const EventsController = nodeapi.EventsController

// NodeEvents returns the events the node of sandbox ns/name recorded, as
// core/v1 events regarding its Sandbox (CoreEvents): one lookup of the
// sandbox (the node's record), nothing stored. A sandbox that does not
// exist has none. Package registry serves them to kubectl describe in dev
// mode (registry.SandboxEvents).
func NodeEvents(f Fleet) func(ctx context.Context, ns, name string) ([]corev1.Event, error) {
	return func(ctx context.Context, ns, name string) ([]corev1.Event, error) {
		sb, err := f.ByRef(ctx, ns+"/"+name)
		if errors.Is(err, fleet.ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, fleetError(err, name, "get")
		}
		return CoreEvents(&sb), nil
	}
}

// CoreEvents renders s's node-recorded events as core/v1 events regarding
// its Sandbox object (its uid, uidOf), oldest first.
func CoreEvents(s *nodeapi.Sandbox) []corev1.Event {
	ns, name := inventory.SplitName(inventory.NameOf(s))
	ref := corev1.ObjectReference{Kind: "Sandbox", APIVersion: sandboxv1beta1.GroupVersion.String(),
		Namespace: ns, Name: name, UID: uidOf(s)}
	out := make([]corev1.Event, 0, len(s.Events))
	for i, e := range s.Events {
		first, last := metav1.NewTime(e.FirstTime), metav1.NewTime(e.LastTime)
		out = append(out, corev1.Event{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Event"},
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s.%s.%d", name, nodeapi.DNSName(s.ID), i),
				CreationTimestamp: first},
			InvolvedObject: ref, Reason: e.Reason, Message: e.Message, Type: e.Type, Count: e.Count,
			FirstTimestamp: first, LastTimestamp: last,
			Source:              corev1.EventSource{Component: "sandboxd", Host: s.Node},
			ReportingController: EventsController, ReportingInstance: s.Node,
		})
	}
	return out
}
