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
package nft
