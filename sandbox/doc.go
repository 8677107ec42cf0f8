// +k8s:deepcopy-gen=package

// Package sandbox holds Hearth's wire names and lifecycle payload types.
//
// It owns the annotation and label keys of docs/API.md#names and the request and
// response bodies of the sandboxes subresources (pause, resume, fork,
// snapshot), registered in agents.x-k8s.io/v1beta1 beside the agent-sandbox
// Sandbox type. It performs no I/O and must not import any other Hearth
// package.
package sandbox
