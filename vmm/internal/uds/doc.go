// Package uds is the machinery the Firecracker and Cloud Hypervisor drivers
// share: a VMM is a child process serving a REST API on a unix socket, and the
// in-guest agent is reached over hybrid vsock (a unix socket the VMM proxies
// to guest AF_VSOCK after a "CONNECT <port>\n" / "OK <n>\n" handshake).
//
// It owns: the HTTP-over-unix-socket client (Client), the per-VM loopback
// TCP → hybrid-vsock relay that gives a Handle its host:port (Relay), VMM
// process spawning, liveness and termination (Process, Alive, Kill), /proc
// measurement (ReadProcStats), and the agent calls a driver makes after boot
// or clone (WaitAgent, Rekey, InitEnv). It never decides which VM exists;
// drivers do.
package uds
