// Package server is Hearth's composition root: it wires the aggregated API
// server (package apiserver) and the components that run beside it over
// one fleet and one fleet view — the e2b gateway (package e2b), the
// Pod-path admission webhook (package webhook), the warm-pool driver
// (package pool/controller) and the SandboxClaim controller (package
// sandboxclaim, in Config.Controllers; it runs when the driver does).
//
// The shape is sample-apiserver's: Options (flags: AddFlags, Complete,
// Validate) → Config (Options.Config: every component's configuration,
// adjustable by embedders) → CompletedConfig (Config.Complete) → Server
// (CompletedConfig.New) → Server.Run. sandbox-apiserver, sandbox-dev
// (package devserver) and the in-process test harnesses all go through
// it; sandbox-e2b runs the gateway alone with GatewayOptions and
// RunGateway.
//
// Lifecycle: nothing but the API server's listener runs before the API
// server serves. The NodeInventory informer, the warm-pool driver, further
// controllers and the e2b gateway each start in a post-start hook of the
// generic API server (the e2b port is bound by New, so a busy port fails
// at startup). Until the informer has synced, /readyz fails its
// "sandbox-view-synced" check, sandboxes requests are 429 with
// Retry-After, and the e2b gateway answers 503 with Retry-After: nothing
// answers from an empty view. A component that fails stops the server.
// Shutdown stops the components first, then the API server (whose
// pre-shutdown hooks still reach a serving API).
//
// Security: with Authentication and Authorization the server delegates to
// the kube-apiserver (sandbox-apiserver); an embedder may instead set
// Authenticator and Authorizer (sandbox-dev's static tokens). Serving with
// neither — anonymous, always-allow — is for tests on loopback and is
// refused on any other address. The fleet secret (--sandboxd-token-file)
// is never sent to a node: the fleet and the driver send each node its own
// nodeapi.NodeToken.
//
// Traces: one TracerProvider (Options.TracerProvider, --tracing-endpoint
// or --tracing-config-file; package internal/tracing) is the API server's
// (k8s.io/apiserver's own tracing filter), its loopback client's, the
// fleet's HTTP client's to the nodes and the e2b gateway's; none set,
// nothing is wrapped.
//
// The package owns wiring only: no storage, no API types, no gateway or
// driver logic; each lives in its package and must not import this one.
package server
