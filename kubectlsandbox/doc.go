// Package kubectlsandbox is the kubectl plugin kubectl-sandbox
// (docs/OPERATIONS.md#kubectl-sandbox): cobra commands on the flags
// kubectl's own plugins use (k8s.io/cli-runtime's ConfigFlags: -n,
// --context, --kubeconfig, --as, ...; PrintFlags: -o json|yaml|name|...).
// cmd/kubectl-sandbox only wires it to the process.
//
// Two surfaces, one credential — the kubeconfig's:
//
//   - the aggregated API (docs/API.md#subresources): pause, resume, fork
//     and snapshot are POSTs of their options kind to
//     sandboxes/NAME/<verb>, through a dynamic client, so RBAC decides
//     (create sandboxes/<verb>); logs is GET sandboxes/NAME/log with
//     kubectl logs' flags (--tail, --since, --since-time, --limit-bytes,
//     --timestamps; get sandboxes/log), read, not followed; top is GET
//     sandboxes/NAME/stats (get sandboxes/stats) for NAME or each listed
//     sandbox, 8 at a time, a paused one a row that says so;
//   - the gateway's router protocol (docs/API.md#router): exec, cp and
//     port-forward are requests to --router-url ($HEARTH_ROUTER_URL)
//     carrying X-Sandbox-ID, X-Sandbox-Namespace and X-Sandbox-Port, and
//     the kubeconfig's bearer token, which the gateway admits when the API
//     would let its holder create sandboxes/exec (port 8888: exec, cp) or
//     sandboxes/portforward (any other port). A read-only user gets 403.
//
// The token is a credential: it is sent over plain http only to a
// loopback router (sandbox-dev's), else the router URL must be https
// (routerURL refuses it before anything is sent). The router's answers are
// a remote party's (the agent runs in the guest): a redirect is never
// followed (the credential would go with it), an error's text has its
// control characters replaced; exec prints the command's output as it
// came and exits with its exit code; cp writes only the local path the
// caller named.
//
// exec runs one command under sh -c with no stdin or terminal (the
// runtime API's POST /execute: the whole output when it ends, at most 7 MiB
// of each stream); its words are quoted, so they reach the program as
// given. cp copies one file each way (POST /upload, GET /download/{path}),
// "-" being stdin or stdout. port-forward serves HTTP (streams and
// WebSocket upgrades included) on a local address and sends each request
// through the router to the sandbox's port; the gateway forwards HTTP,
// not raw TCP.
package kubectlsandbox
