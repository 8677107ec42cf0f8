// Package node is the node daemon sandboxd: it holds warm pools of microVMs
// per pool key, boots them through a vmm.Driver, hands them out in O(1)
// under one mutex, serves the node HTTP API of CONTRACT §3 (wire types in
// api.go, a client in client.go), reaps leases at their deadline, and
// publishes the node's NodeInventory.
//
// Embedding: New returns a Node whose Handler can be served on any listener,
// so one process may run several nodes (sandbox-dev runs N of them, each on
// its own loopback listener, each with its own DataDir and driver root).
// Run starts the background loops; Close shuts down in order.
//
// What it owns: the claim table (in memory, mirrored in a bbolt file under
// Config.DataDir), the warm pools, the golden checkpoints it clones warm VMs
// from (<data-dir>/golden), the user checkpoints (<data-dir>/checkpoints),
// and every VM under its driver's root. It must not touch anything else:
// routing between nodes, pool sizing across the fleet and the Kubernetes
// objects are other packages' jobs.
//
// Health: a background sweep (Config.WarmCheckInterval, default 10s)
// probes every warm VM's agent off the claim path and evicts, destroys and
// refills one that fails twice in a row or that its driver reports gone, so
// a claim does not hand out a warm VM whose agent died after boot (between
// two sweeps it still can). The same sweep probes every claimed sandbox that
// is not hibernated and brings back one whose agent died the same way
// through Driver.Restore (same run directory, so its files survive; new PID
// and address, persisted and published); a failed restore keeps the claim
// (listed, releasable, reaped at its deadline) and is retried after a
// bounded backoff, so a claimed sandbox is never destroyed by the sweep.
// See health.go.
//
// Durability: the store is opened with NoSync. Every record is written to
// the file before the API answers, so a killed process (kill -9, a panic)
// loses nothing: the page cache survives the process. Only a host crash or
// power loss can lose the last writes, and then the VMs are gone too.
//
// Restart: New re-adopts every recorded sandbox through Driver.Restore,
// then destroys every VM under the driver's root that the table does not
// own (warm VMs of the previous run, half-booted leftovers). Warm VMs are
// never persisted: they are rebuilt from the persisted pool targets.
package node
