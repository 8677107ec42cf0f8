// Package sim is the process-backed VMM backend: each "microVM" is a
// confined host process running the in-guest agent (cmd/sandbox-agent,
// package e2b/envd). It needs no KVM and no root-only feature, so it is the
// default backend and the one every test and `sandbox-dev` runs on.
//
// The driver owns the directory it is given (Options.Root) and the agent
// processes it starts, nothing else. Each VM lives in <root>/<id>/:
//
//	vm.json   the VM's record (identity, pid, addr, paused), rewritten atomically
//	token     the agent's access token (0600)
//	addr      the agent's bound host:port, written by the agent
//	agent.log the agent's stdout and stderr
//	home/     the guest's root and working directory
//	tmp/      the guest's TMPDIR
//
// Each agent runs in its own process group (Setpgid) with a minimal
// environment (the node's environment, which may hold secrets, is not
// inherited). There is no parent-death signal on purpose: guests must
// survive a node crash so that the restarted node re-adopts them. Pause and
// Resume send SIGSTOP and SIGCONT to the whole group.
//
// A process is recognized as a VM's only if /proc/<pid>/cmdline carries that
// VM's addr-file path, which guards every signal against PID reuse.
//
// Checkpoints (Snapshot) are a copy of the VM's home/ plus manifest.json;
// Clone copies a checkpoint into a fresh VM directory and starts a new agent
// with the new identity (id, token, port).
package sim
