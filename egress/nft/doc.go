// Package nft enforces an egress.Policy: the kernel packet filter
// (nftables, over netlink via google/nftables) a node owns for each
// sandbox, outside the guest.
//
// One table, Table (family inet), in the sandbox's network namespace (or
// on its VM's path), reached through a Filter (a lasting netlink
// connection into the namespace, opened as the VM boots), owned by the node: the guest's root has no
// capability over it. Prepare installs its skeleton and the
// pool's policy (a chain whose allows return to the claim's rules: a packet
// leaves only if both allow it) as a warm VM boots
// (replacing a table waits for an RCU grace period, milliseconds, which
// must not fall on a claim); Apply adds the policy at claim time in one
// netlink transaction, merging runs of rules that share an action and
// ports into address sets, so a 50-rule policy is a handful of kernel
// rules (BenchmarkApply_50Rules); Pin adds the node resolver's answers to
// the domain sets with their TTLs. A deny rejects at once (a TCP reset,
// else ICMP administratively prohibited): a denied call fails, it does not
// hang. TestApply_KernelAgreesWithDecide loads each policy into a real
// namespace and checks the kernel's verdict on every probe against egress.Policy.Decide.
//
// An owner filter (OpenOwner) is the same filter for a VM whose network is
// a host process of its own uid (qemu's passt) in a namespace it shares:
// its chains and sets live in one table for all uids, OwnerTable, whose
// output chain looks the sending socket's uid up in a verdict map and
// jumps to that uid's chains — one lookup per packet however many VMs
// (500 filters add 0.8 µs to a loopback UDP send; a table per uid, a hook
// each, had added 69 µs). Every other packet passes; the uid's are held
// to the policies as above (loopback included in what passes: the host's
// own addresses are the caller's to guard). Prepare makes a new
// generation of the uid's chains and switches the map to it in one
// transaction; the chains outlive the process, a new Filter of the uid
// takes them over, Delete removes them. TestOpenOwner_FiltersOnlyItsUid
// probes as two uids and as root.
package nft
