package inventory

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName of NodeInventory.
const GroupName = "sandbox.cocoonstack.io"

// SchemeGroupVersion is sandbox.cocoonstack.io/v1beta1.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1beta1"}

// Resource is the plural resource of NodeInventory.
const Resource = "nodeinventories"

// GroupVersionResource of NodeInventory.
var GroupVersionResource = SchemeGroupVersion.WithResource(Resource)

var (
	// SchemeBuilder registers NodeInventory and NodeInventoryList.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &NodeInventory{}, &NodeInventoryList{})
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}

// NodeInventory is one node's published state.
//
// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type NodeInventory struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Node is the node's name; it equals metadata.name.
	Node string `json:"node"`
	// Address is the node daemon's advertised host:port. A node without an
	// address is not routable: no claims, verbs or warm targets go to it.
	Address string `json:"address,omitempty"`
	// Pools are the node's warm pools.
	Pools []Pool `json:"pools,omitempty"`
	// Entries are the node's claimed sandboxes, sorted by name.
	Entries []Entry `json:"entries,omitempty"`
}

// Pool is one warm pool's capacity on a node.
type Pool struct {
	Template string `json:"template"`
	Net      string `json:"net,omitempty"`
	Size     string `json:"size,omitempty"`
	// Warm is the number of warm microVMs ready to be claimed.
	Warm int32 `json:"warm"`
	// Target is the warm count the node is asked to hold.
	Target int32 `json:"target"`
}

// Entry is one claimed sandbox.
type Entry struct {
	// Name is "<namespace>/<name>": the claim ref, or "default/" and the
	// claim id made DNS-safe when the sandbox has no claim ref (NameOf).
	Name string `json:"name"`
	// ID is the node-local claim id ("sb_…").
	ID string `json:"id,omitempty"`
	// Phase is Running or Paused.
	Phase string `json:"phase"`
	// Template is the pool template (image reference) the sandbox came from.
	Template string `json:"template,omitempty"`
	// Net and Size are the rest of its pool key (the claim's, fixed at
	// claim), so that every replica reports them (e2b's cpuCount and
	// memoryMB derive from the size).
	Net  string `json:"net,omitempty"`
	Size string `json:"size,omitempty"`
	// ClaimRef is "<namespace>/<name>" of the claim, if any.
	ClaimRef string `json:"claimRef,omitempty"`
	// AgentAddr is the sandbox agent's host:port.
	AgentAddr string `json:"agentAddr,omitempty"`
	// Deadline is the end of the sandbox's lease.
	Deadline *metav1.Time `json:"deadline,omitempty"`
	// ClaimedAt is when the node delivered the sandbox.
	ClaimedAt *metav1.Time `json:"claimedAt,omitempty"`
	// Labels and Annotations are the user's, as recorded with the claim
	// (nodeapi.Object), so that lists and label selectors see them.
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	// E2B is the sandbox's e2b visibility (nodeapi.Lifecycle.E2B), fixed
	// at claim, so that a list of the e2b gateway's sees it.
	E2B bool `json:"e2b,omitempty"`
	// Metadata is the claim's metadata (e2b's), fixed at claim, so that
	// the e2b gateway's list filters see it on every replica. A node's
	// change stream carries it; its published NodeInventory does not (an
	// entry's metadata, up to e2b's 64 KiB, would soon outgrow the API
	// server's object size limit), so an entry read from a published
	// object has none, and the live view keeps what the stream gave it.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// NodeInventoryList is a list of NodeInventory.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type NodeInventoryList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeInventory `json:"items"`
}
