package inventory

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// DefaultFieldManager is the server-side-apply field manager of node publishers.
const DefaultFieldManager = "hearth-sandboxd"

// Publisher writes a node's NodeInventory somewhere (the Kubernetes API, an
// in-process store). Publish is called with the node's whole current state;
// it must be safe to call repeatedly and a failed call is simply retried.
type Publisher interface {
	Publish(ctx context.Context, inv *NodeInventory) error
}

// PublisherFunc adapts a function to Publisher.
type PublisherFunc func(ctx context.Context, inv *NodeInventory) error

// Publish calls f.
func (f PublisherFunc) Publish(ctx context.Context, inv *NodeInventory) error { return f(ctx, inv) }

// applyPublisher server-side-applies NodeInventory objects.
type applyPublisher struct {
	client       dynamic.Interface
	fieldManager string
}

// NewApplyPublisher returns a Publisher that server-side-applies the node's
// sandbox.cocoonstack.io/v1beta1 NodeInventory (cluster-scoped, named after
// the node) with forced ownership, as fieldManager (default
// "hearth-sandboxd"). A deleted object is recreated by the next publish.
func NewApplyPublisher(cfg *rest.Config, fieldManager string) (Publisher, error) {
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return NewApplyPublisherFor(client, fieldManager), nil
}

// NewApplyPublisherFor is NewApplyPublisher over an existing dynamic client.
func NewApplyPublisherFor(client dynamic.Interface, fieldManager string) Publisher {
	if fieldManager == "" {
		fieldManager = DefaultFieldManager
	}
	return &applyPublisher{client: client, fieldManager: fieldManager}
}

// ToUnstructured renders inv as the apply configuration of its object:
// apiVersion, kind, metadata.name (= .node) and the payload, nothing else.
func ToUnstructured(inv *NodeInventory) (*unstructured.Unstructured, error) {
	if inv.Node == "" {
		return nil, fmt.Errorf("inventory: NodeInventory has no node name")
	}
	obj := &NodeInventory{
		Node:    inv.Node,
		Address: inv.Address,
		Pools:   inv.Pools,
		Entries: inv.Entries,
	}
	obj.Name = inv.Node
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(SchemeGroupVersion.String())
	u.SetKind("NodeInventory")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	return u, nil
}

func (p *applyPublisher) Publish(ctx context.Context, inv *NodeInventory) error {
	u, err := ToUnstructured(inv)
	if err != nil {
		return err
	}
	_, err = p.client.Resource(GroupVersionResource).Apply(ctx, u.GetName(), u,
		metav1.ApplyOptions{FieldManager: p.fieldManager, Force: true})
	if err != nil {
		return fmt.Errorf("inventory: applying NodeInventory %s: %w", u.GetName(), err)
	}
	return nil
}
