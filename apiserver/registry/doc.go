// Package registry serves the kinds the embedded default stores for real:
// extensions.agents.x-k8s.io/v1beta1 sandboxtemplates and sandboxwarmpools
// (with the status and scale subresources), sandbox.cocoonstack.io/v1beta1
// nodeinventories (cluster-scoped), coordination.k8s.io/v1 leases (so the
// warm-pool driver elects one leader in every mode) and events.k8s.io/v1
// events (the controllers' Kubernetes Events, kept EventTTLSeconds). For
// kubectl describe it also builds core/v1 events (LegacyEventsGroup,
// installed at /api): a read-only, list-only view of the stored events
// plus a sandbox's node-recorded ones (events.go).
//
// Every kind goes through k8s.io/apiserver's generic registry Store over
// etcd3 storage: resourceVersion, watch (with the watch cache), update,
// merge/JSON patch and server-side apply behave as on a kube-apiserver.
// Validation follows the upstream CRDs: spec.replicas >= 0,
// spec.sandboxTemplateRef.name required, NodeInventory metadata.name ==
// .node; a SandboxTemplate's spec.networkPolicy and networkPolicyManagement
// must translate into an egress policy (egress.FromTemplate: no pod or
// namespace selectors, no named ports, at most egress.MaxRules rules), or
// the create or update is a 422 naming the field. On the status subresource spec changes are ignored; on the main
// resource status changes are ignored.
//
// The package owns no server: AddToScheme registers the types (served
// version and an identity __internal version) in the caller's scheme,
// APIGroups builds the APIGroupInfos to install, GetOpenAPIDefinitions
// provides their schemas (taken from the upstream CRDs). It never touches
// sandboxes: those are never stored (docs/API.md#sandboxes).
package registry
