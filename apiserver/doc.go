// Package apiserver is the aggregated API server of Hearth: it serves
// agents.x-k8s.io/v1beta1 sandboxes (create, get, list, watch, delete,
// update, patch) and the subresources pause, resume, fork and snapshot
// (docs/API.md#sandboxes), built on k8s.io/apiserver in the sample-apiserver shape:
// Config{GenericConfig, ExtraConfig} → Complete → CompletedConfig.New() →
// Server.Run.
//
// Nothing about a sandbox is stored: the sandboxes REST storage lives in
// apiserver/registry/sandbox (package sandboxstore), which this package
// installs; the other served kinds are in apiserver/registry.
//
// The package owns the scheme (Scheme, Codecs), the OpenAPI definitions and
// the generic server that serves them. It takes an already-built fleet,
// through the narrow interface the storage consumes (ExtraConfig.Fleet,
// sandboxstore.Fleet, not the whole fleet.Fleet), and the live fleet view
// (ExtraConfig.Live, required: the one read model of lists, watches and
// resourceVersions), and its sync state (ExtraConfig.ViewSynced: until it
// reports true, sandboxes requests are 429 with Retry-After and /readyz
// fails).
// With delegated requestheader authentication (behind kube-apiserver),
// every request but the health checks is likewise 429 until the front-proxy
// CA has loaded from its ConfigMap (authnready.go), never the 403 for
// system:anonymous a proxied request would get before.
// Embedders (sandbox-dev) install more API groups with
// ExtraConfig.ExtraAPIGroups and ExtraOpenAPIDefinitions, and serve
// handlers at non-resource paths with ExtraConfig.Handlers.
//
// It must not reach the nodes itself (the storage does, through the
// fleet), nor touch the wiring: flags, credentials, informers and the
// components composed around the API (the e2b gateway, the Pod-path
// webhook, the warm-pool driver) belong to package server, and this
// package imports none of them (a test checks it).
package apiserver
