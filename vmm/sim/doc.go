// Package sim is the default VMM backend: a confined process sandbox. Each
// "microVM" is the in-guest agent (cmd/sandbox-agent, package agent) running
// in its own Linux namespaces and cgroup on the template's root filesystem.
// Said plainly: this is container-level isolation, not a VM. The guest
// shares the host kernel; a kernel bug is a sandbox escape. Use qemu,
// firecracker or cloud-hypervisor where that matters. It needs root on the
// node (it mounts, creates namespaces and cgroups) but no KVM, so it is the
// backend every test and `sandbox-dev` runs on.
//
// The driver owns the directory it is given (Options.Root), the processes
// it starts, their cgroups and their mounts, nothing else. Each VM lives in
// <root>/<id>/:
//
//	vm.json   the record: identity, init pid and cgroup (written the moment
//	          the init starts, before the agent answers), addr, paused
//	token     the agent's access token (0600, host root)
//	agent.log the init's and the agent's output (capped at 4 MiB per start)
//	upper.img the VM's disk: a sparse ext4 image of a fixed size (see Disk)
//	upperfs/  its mount point, holding upper/ (the overlay's upperdir, the
//	          guest's writable layer) and work/ (overlayfs workdir)
//	rootfs/   the VM's root: overlay of the template and upperfs/upper
//
// <root>/.lower/<hash>/ holds each template root filesystem copied once with
// its ids shifted into the guests' range (see below), <root>/.agent/<hash>/
// the agent executable as an overlay layer (/.hearth-agent/<name>, owned by
// host root: the guest runs it but cannot change it; one layer per binary
// content, so an upgraded agent does not touch running VMs),
// <root>/.images/busybox the built-in root filesystem used when
// Options.Rootfs is nil. A VM's root is the overlay
// agent layer : template lower : upper. The kernel shows the overlay's
// options to the guest (mountinfo) as given, so no host path is in them:
// the lower layers are named by descriptor (/proc/self/fd/<n>, wherever
// Options.LowerCache is), upper and work relative to the VM directory.
//
// # Templates
//
// Options.Rootfs maps a template to a root filesystem directory; sandboxd
// wires package image there with --vmm-opt image_cache=<dir>|default (OCI
// images, the built-in Debian bookworm image). Without it every template
// runs on a built-in busybox root (tests, sandbox-dev). The first VM of a
// template pays for the id-shifted copy (the Debian image: about 250 MB,
// tens of seconds); idmapped lower layers would remove that copy.
//
// # Mechanism
//
// Plain clone flags from Go plus a re-executed init, no bubblewrap or crun.
// Those would add a dependency and a second process model and still leave
// the parts that matter to us (a netns owned by the initial user namespace,
// overlay layers the driver copies, cgroup adoption after a node crash) to
// this package. The init is the driver's own binary (/proc/self/exe) started
// with argv[0] "hearth-sim-init"; this package's init() runs it, so any
// binary that links the package can be a VM's init. Start-up:
//
//  1. The driver creates the VM's cgroup (limits from the size class),
//     mounts the VM's disk at upperfs/ and the overlay at rootfs/ and, on an OS thread that unshares a new
//     network namespace (so the netns belongs to the initial user
//     namespace), starts the init with CLONE_NEWNS|NEWPID|NEWUTS|NEWIPC.
//  2. The init blocks reading its config from a pipe (fd 3) while the
//     driver moves it into the cgroup and records its pid in vm.json, sets
//     up the network, then writes the config (including the token and the
//     VM's environment, vmm.Spec.Env, neither ever in argv or env) and
//     closes the pipe. A driver that dies before that
//     closes the pipe and the init exits: no orphan.
//  3. The init (pid 1, still host root) makes / private, mounts /proc (its
//     own pid namespace), a tmpfs /dev with null, zero, full, random,
//     urandom and tty bound from the host, devpts and /dev/shm, and a tmpfs
//     /.hearth (0700, owned by the guest's root) holding the token (0600)
//     and, for a VM with an environment, env (0600: a JSON object, so a
//     value may hold any byte but NUL — commas, '=', newlines, quotes).
//     The boot id: every start of the init is a boot, with an id of its
//     own (a random UUID the driver puts in the config) in
//     /.hearth/boot_id (host root's, 0444), bound read-only over
//     /proc/sys/kernel/random/boot_id — the guest shares the host's
//     kernel, whose id it would read there. Boot, Clone and a Restore
//     that starts the VM again (after Stop: a pause without memory; or
//     after its init died) are new boots with new ids; Pause/Resume and
//     a Restore that re-attaches to the running VM keep the id.
//     The guest owns its writable layer, which persists, so any of these
//     may be its symlink, hard link or file: each mount point is opened in
//     the root with openat2 (RESOLVE_BENEATH, no symlink, magic link or
//     "..") and mounted onto by descriptor (/proc/self/fd/N); a
//     non-directory there is replaced by a fresh directory, never
//     followed; files are created O_EXCL|O_NOFOLLOW in directories so
//     opened (see inroot.go). No host path is resolved through guest data.
//     Every descriptor past stdio it inherited is made close-on-exec. It
//     pivot_roots into rootfs/ and detaches the host's root: no node data
//     dir, no other VM's layers, no host path.
//  4. It starts the agent (Options.AgentCommand[0], a static binary, from
//     the agent layer) in a new user namespace (plus uts, ipc and cgroup
//     namespaces) as the namespace's root, serving 0.0.0.0:49983
//     (agentapi.Port), with --token-file /.hearth/token, --root /home/user
//     and --env-file /.hearth/env when there is an environment. The
//     agent's first
//     act is to confine itself (package seccomp, asked for by
//     $HEARTH_SIM_SECCOMP): the syscall filter, then its capability sets
//     cut to Docker's default, so every guest process inherits both; the
//     driver refuses a VM whose agent does not show "Seccomp: 2" and
//     capability sets within seccomp.Capabilities. The agent and every
//     guest process start with RLIMIT_NOFILE 1024 (soft) / 65536 (hard,
//     which the guest cannot raise). Then the
//     init drops to host uid/gid UIDBase+65536 (no account, no guest id) with
//     no capabilities and no-new-privs, and only reaps children; when the
//     agent exits the init exits and the kernel kills the rest of the pid
//     namespace. Its command line, which the guest sees as pid 1's, is
//     "hearth-sim-init <id>".
//
// The guest gets no more kernel surface than Docker's default seccomp
// profile and capability set give a container. Its capabilities (in its
// own user namespace; bounding, permitted and effective sets) are Docker's
// default: CHOWN, DAC_OVERRIDE, FSETID, FOWNER, MKNOD, NET_RAW, SETGID,
// SETUID, SETFCAP, SETPCAP, NET_BIND_SERVICE, SYS_CHROOT, KILL and
// AUDIT_WRITE; a set-uid program cannot regain more. The syscall filter
// (amd64; other architectures run without one, under the capability bound
// alone) makes clone/unshare with any CLONE_NEW* flag and setns fail (no
// namespace of any kind: a nested user namespace would open most of the
// kernel to the guest's root, the others need capabilities it no longer
// has), as well as every mount call (mount, umount2, pivot_root, open_tree,
// move_mount, fsopen, fsconfig, fsmount, fspick, mount_setattr), keyrings,
// bpf, perf_event_open, userfaultfd, io_uring, syslog, sethostname, NUMA
// memory policies, module, kexec, swap, I/O-port and a few more calls,
// and vsock sockets (socket(AF_VSOCK): vsock is no network namespace's, so
// the host's and its hypervisor's vsock services would answer; Docker
// refuses them too) (EPERM); clone3 returns ENOSYS (libc falls back to clone, whose flags
// are checked); a foreign architecture kills the process.
//
// The mount, pid and network namespaces belong to the initial user
// namespace, and the guest makes no namespace of its own, so the guest's
// root cannot mount, unmount, change routes or create network devices
// anywhere; it can own its files, chown within its range, change ids
// (sudo, apt's _apt sandbox), bind low ports and chroot.
//
// # Ids
//
// One subordinate range shared by all VMs: guest id g is host id
// Options.UIDBase+g (default DefaultUIDBase = 0x70000000) for g in
// [0, 65536). The guest's root is host uid 0x70000000, the image's `user`
// (1000) is 0x700003e8: no host account. The template's files are copied
// once per template with ids shifted by the base (the overlay's lower
// layer), so every guest sees its files owned as the image says. A range
// per VM would need a shifted copy per VM, or idmapped lower layers (a
// possible later step); the namespaces already keep VMs apart (own pid
// namespace, own mounts, own netns), so sharing uids across VMs only matters
// to a process that has already escaped.
//
// # Cgroups
//
// One cgroup per VM, <CgroupParent>/<hash of Root>-<id> (default parent
// "hearth-sim"): on v1 in the freezer, memory, cpu, cpuacct and pids
// hierarchies, on v2 in the unified one (detected by
// /sys/fs/cgroup/cgroup.controllers). The size class sets memory and CPU,
// its shape in the one table every backend boots with (pool.Shapes): small
// 1 CPU / 2 GiB, medium 4 / 8 GiB, large 8 / 16 GiB (memory limit and
// a CFS quota of cpus×100ms per 100ms), plus pids.max 4096 (tasks: a fork
// bomb stops there; RLIMIT_NPROC would count every VM's processes
// together, their uids being shared). No cgroup controller counts open
// files: a process holds at most 65536 (RLIMIT_NOFILE), and each open file
// charges about 280 bytes to the VM's memory cgroup (kernel memory
// accounting), so the memory limit bounds a VM's total (small: about 7
// million). The node's fs.file-max should not be lower than that
// (systemd's default is unlimited), or one VM can take the host's file
// table. A process that takes the VM past its memory limit is killed by
// the kernel's OOM killer; OOMKills (vmm.OOMCounter) reads the cgroup's
// oom_kill counter (v1 memory.oom_control, v2 memory.events), which
// starts from 0 with each new cgroup. Pause freezes the
// cgroup (freezer.state / cgroup.freeze) and Resume thaws it. Stop, Destroy
// and failed starts kill every process in it (cgroup.kill on v2; otherwise
// freeze, SIGKILL every task, thaw, until empty), then Destroy removes it.
// A pid is only ever recognized as a VM's init if /proc/<pid>/cgroup names
// that VM's cgroup (the guard against pid reuse); a /proc that cannot be
// read (EMFILE...) is an error, never "not running".
//
// Orphans: each driver registers its Root in /run/hearth-sim/<parent>/<hash>
// (share-locked while its process lives), and New (or SweepOrphans) kills
// and removes the cgroups under the parent whose root no longer exists and
// whose registration no live driver holds — the guests of a node whose data
// dir was deleted while it was down. A root is known from the registration
// or from the VM log its guest writes to; a guest of unknown root, of an
// existing root or of a live driver is never touched (see orphans.go).
// What is still mounted under a deleted root (its guests' disks) is
// unmounted, which frees their loop devices.
//
// # Network
//
// Egress VMs get /etc/resolv.conf naming 10.0.2.100 (a read-only bind from
// the agent layer onto the file opened in the root, no link followed; a
// guest-made symlink at /etc or /etc/resolv.conf is left alone). The
// hostname is "sandbox", and /etc/hosts names it: an image's own
// /etc/hosts when it does (the built-in images), else (most OCI images) a
// copy of it with "127.0.1.1 sandbox" added, on the /.hearth tmpfs and
// bound over /etc/hosts: writable by the guest's root, rewritten at each
// start, as in Docker. The init opens the target inside the guest's root
// and on its root mount (openat2 RESOLVE_IN_ROOT|RESOLVE_NO_XDEV) and binds
// onto the descriptor, so a guest-made link cannot move the bind.
//
// Every VM has its own network namespace, created by the driver (owned by
// the initial user namespace: the guest has no CAP_NET_ADMIN over it, and
// its CAP_NET_RAW makes no raw socket there; net.ipv4.ping_group_range is
// "0 2147483647", as Docker sets it, so ping's ICMP echo sockets work).
// "none": loopback only. "egress": slirp4netns (user-mode TCP/IP, run as
// host root with --enable-sandbox --enable-seccomp --disable-host-loopback,
// in the VM's cgroup so it is frozen and killed with the VM) gives tap0,
// 10.0.2.100/24, gateway 10.0.2.2. Before the init proceeds
// the driver adds unreachable routes in the namespace for 10.0.2.2 (the
// host), 169.254.0.0/16 (link-local, metadata) and every address of the
// node, which the guest cannot remove.
//
// # Egress policy
//
// As an egress VM boots the driver prepares its filter (egress/nft: a
// table in the VM's namespace, which the guest cannot change) and serves
// the node's resolver for it (egress/resolver) on 10.0.2.100:53, from
// sockets the driver opened in the namespace: the guest's resolv.conf
// names it (slirp's own DNS, 10.0.2.3, is unused). SetEgress
// (vmm.EgressEnforcer) applies a policy at claim time: the filter only
// gains rules (the claim path's cost), and the resolver learns the policy;
// a VM re-adopted after a node restart gets a new resolver and, at the
// node's SetEgress, its table replaced (addresses pinned before the
// restart are dropped: the guest resolves again). Options.UplinkNetns
// runs slirp4netns and the resolvers' upstream queries in another network
// namespace (the egress tests' own "internet", internal/testnet);
// Options.DNS names the upstream servers.
//
// The node reaches the agent at Handle.Addr, a 127.0.0.1 port the driver
// forwards into the VM's netns (a socket created on a thread that joined
// the netns, connecting to agentapi.Port there). The forwarder lives in
// the driver's process: after a node restart Restore re-attaches to the
// running VM and returns a new Addr. Driver.Dial (vmm.PortDialer) connects
// to any port of a guest the same way.
//
// # Disk
//
// Each VM's writable layer lives on a disk of its own, as on e2b and
// Firecracker: upper.img, a sparse ext4 image of Options.DiskBytes
// (default DefaultDiskBytes, 10 GiB, for every size class; sandboxd and
// sandbox-dev --disk-size), made by mkfs.ext4 at Boot (no reserved
// blocks; a fresh image takes about 4 MiB of the host's disk). The driver
// attaches it to a loop device with LO_FLAGS_AUTOCLEAR and mounts it at
// upperfs/ (nodev, nosuid, errors=remount-ro, discard: what the guest
// deletes is punched out of the image). The guest's df / shows the disk's
// size; writing past it is ENOSPC in the guest, never on the host.
// Teardown (Stop, Destroy, a failed start, a restart) unmounts rootfs/ and
// upperfs/, and the kernel detaches the loop device once the mount is
// gone: no loop device outlives its mount. A restart mounts the image
// only once no loop device is backed by it any more (a mount of the VM
// just killed may take a moment to go); a new VM's image is a new file,
// mounted at once. Destroy removes the directory
// only when nothing is mounted under it. Stats reads the disk's usage with
// statfs, never by walking files. A node restarted in a new mount
// namespace (a container's) while its VMs ran on has no upperfs/ mount of
// theirs: Stats and Snapshot's flush then go through the init's root
// (/proc/<pid>/root, the overlay, whose statfs and syncfs are its disk's).
//
// # Checkpoints
//
// Snapshot freezes the VM, flushes its disk (syncfs) and copies upper.img
// sparsely: only the image's data (SEEK_DATA/SEEK_HOLE), blocks of zeros
// left as holes, so a checkpoint takes what the guest's file system holds
// (a 1 GiB sparse file with 8 hard links is a few KiB), never the image's
// size, and the host never walks, opens or follows a guest file. It then
// writes manifest.json (version 3). A bound from vmm.WithSnapshotLimit
// (the node's remaining snapshot bytes) is enforced while copying: past it
// the copy stops, is removed, and Snapshot fails with
// vmm.ErrSnapshotTooLarge. Checkpoints of an earlier sim (version 2, a
// copied upper/ directory) are refused with ErrSnapshotInvalid naming the
// version, and a VM directory of an earlier sim (upper/ and no upper.img)
// is not restored (ErrNotRunning): take such snapshots again.
//
// Clone copies the image the same way into a new VM (it keeps the
// checkpoint's disk size) and boots it with the new identity: the token is
// spec.Token from the first instruction the agent runs, so the
// checkpointed VM's token is never valid on a clone (it lived only in the
// source's tmpfs and memory). Process state is not checkpointed: a clone
// boots afresh on the copied disk.
//
// The token is the node's (spec.Token), written by the driver to <dir>/token
// and handed to each start of the init; no secret is ever read back from
// the guest. A re-key through the agent (POST /hearth/identity, which only
// the tenant can reach in sim) lasts until the VM restarts: Stop/Restore
// bring it back with the host's token, which is what the node's record
// holds.
package sim
