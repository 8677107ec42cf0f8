package sandbox

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SandboxPauseOptions is the body of POST .../sandboxes/{name}/pause.
// Pausing an already paused sandbox succeeds.
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type SandboxPauseOptions struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
}

// SandboxResumeOptions is the body of POST .../sandboxes/{name}/resume.
// Resuming a running sandbox succeeds.
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type SandboxResumeOptions struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
}

// SandboxForkOptions is the body of POST .../sandboxes/{name}/fork.
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type SandboxForkOptions struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Count is the number of children; 0 means 1, negative is a 400.
	Count int32 `json:"count,omitempty"`
	// TTLSeconds is each child's lease; 0 means the node default.
	TTLSeconds int32 `json:"ttlSeconds,omitempty"`
}

// SandboxForkChild describes one child delivered by a fork.
type SandboxForkChild struct {
	// SandboxID is the child's claim id.
	SandboxID string `json:"sandboxID"`
	// Name is the child's sandbox name in the parent's namespace (its claim id).
	Name string `json:"name,omitempty"`
	// NodeName is the node holding the child.
	NodeName string `json:"nodeName"`
	// Address is the child's agent host:port.
	Address string `json:"address,omitempty"`
	// Deadline is the child's granted lease expiry.
	Deadline *metav1.Time `json:"deadline,omitempty"`
}

// SandboxForkResult is the response of the fork subresource.
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type SandboxForkResult struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Children          []SandboxForkChild `json:"children"`
}

// SandboxSnapshotOptions is the body of POST .../sandboxes/{name}/snapshot.
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type SandboxSnapshotOptions struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Name optionally names the snapshot.
	Name string `json:"name,omitempty"`
}

// SandboxSnapshotResult is the response of the snapshot subresource.
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type SandboxSnapshotResult struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	SnapshotID        string      `json:"snapshotID"`
	Name              string      `json:"name,omitempty"`
	NodeName          string      `json:"nodeName"`
	CreationTimestamp metav1.Time `json:"creationTimestamp"`
}
