// Package agentapi is the wire of the in-guest agent (package agent), as
// nodeapi is the node daemon's: the agent's ports, the headers and paths
// Hearth's components use to reach it, the credentials derived from a
// sandbox's token (the forward-only credential, e2b's signed file URLs),
// the bodies of /init and of the re-key, and a small Go client (Client).
// The agent serves it; the node, the VMM drivers (qemu, and Firecracker and
// Cloud Hypervisor through vmm/internal/uds) and the e2b gateway speak it.
//
// It owns the wire and nothing else: it links only the standard library
// and golang.org/x (internal/deps checks), never the agent itself — its interpreter, pty
// and process code stay in the guest — and it holds no state beyond a
// client's address and token.
//
// # Routes
//
// The agent serves the part of e2b's envd API the e2b SDK uses (package
// agent documents it) on Port; what Hearth itself sends it:
//
//	GET  /health                 → 204; the one route that needs no token
//	POST /init                   InitRequest → 204 (envVars added to every later process)
//	POST /hearth/open            InitRequest → 204 (as /init, and opens a held agent; node only)
//	POST /hearth/identity        IdentityRequest → 204 (the token is replaced; node only)
//	GET  /hearth/logs?since=&tail=&limit=  → Logs (the sandbox log, LogsQuery; node only)
//	GET  /hearth/logs?follow=true&since=&tail= → ndjson LogEntry lines as written (ParseFollow; 429 past MaxLogFollowers)
//	GET  /hearth/oom-kills       → OOMKills (the guest kernel's OOM kill count; node only)
//	GET|POST /files?…&signature= a signed file URL (FileSignature) instead of the token
//	/agent-sandbox/…             agent-sandbox's runtime API (RuntimePrefix)
//
// Every other request carries the sandbox's access token in
// AccessTokenHeader (401 otherwise), or — to a guest port only
// (ForwardPortHeader) — the forward-only credential ForwardToken(token) in
// ForwardTokenHeader. Paths under InternalPathPrefix are the node's alone:
// the e2b gateway answers 404 for them. Headers starting with
// InternalHeaderPrefix are what Hearth's components set for each other: a
// proxy drops a client's before setting its own, and none reaches a guest
// app (IsInternalHeader).
//
// # Words
//
// The access token is the sandbox's token (the e2b SDK's envd access
// token); re-keying (SetIdentity) replaces it in a running agent, as a
// VMM driver does for a VM cloned from a checkpoint whose memory holds the
// source's token.
package agentapi
