package firecracker

// Request bodies of the Firecracker REST API, field for field from
// Firecracker's swagger (src/firecracker/swagger/firecracker.yaml,
// "definitions"). Firecracker rejects unknown fields with 400, so nothing
// beyond these is ever sent. Exported so the fake (fcfake) decodes exactly the
// same schema, with DisallowUnknownFields.

// BootSource is PUT /boot-source (definitions.BootSource; required:
// kernel_image_path).
type BootSource struct {
	// KernelImagePath: "Host level path to the kernel image used to boot the guest".
	KernelImagePath string `json:"kernel_image_path"`
	// BootArgs: "Kernel boot arguments".
	BootArgs string `json:"boot_args,omitempty"`
	// InitrdPath: "Host level path to the initrd image used to boot the guest".
	InitrdPath string `json:"initrd_path,omitempty"`
}

// Drive is PUT /drives/{drive_id} (definitions.Drive; required: drive_id,
// is_root_device; path_on_host and is_read_only required for virtio-block).
type Drive struct {
	DriveID      string `json:"drive_id"`
	PathOnHost   string `json:"path_on_host"`
	IsRootDevice bool   `json:"is_root_device"`
	IsReadOnly   bool   `json:"is_read_only"`
}

// MachineConfig is PUT /machine-config (definitions.MachineConfiguration;
// required: vcpu_count (1..32, 1 or even), mem_size_mib).
type MachineConfig struct {
	VcpuCount  int `json:"vcpu_count"`
	MemSizeMib int `json:"mem_size_mib"`
	// Smt: "Flag for enabling/disabling simultaneous multithreading" (x86 only).
	Smt *bool `json:"smt,omitempty"`
}

// NetworkInterface is PUT /network-interfaces/{iface_id}
// (definitions.NetworkInterface; required: iface_id, host_dev_name).
type NetworkInterface struct {
	IfaceID     string `json:"iface_id"`
	HostDevName string `json:"host_dev_name"`
	GuestMAC    string `json:"guest_mac,omitempty"`
}

// Vsock is PUT /vsock (definitions.Vsock; required: guest_cid (>= 3),
// uds_path). Host-initiated connections: connect to uds_path and send
// "CONNECT <port>\n".
type Vsock struct {
	GuestCID uint32 `json:"guest_cid"`
	UDSPath  string `json:"uds_path"`
}

// InstanceAction is PUT /actions (definitions.InstanceActionInfo; action_type
// one of FlushMetrics, InstanceStart, SendCtrlAltDel).
type InstanceAction struct {
	ActionType string `json:"action_type"`
}

// VM is PATCH /vm (definitions.Vm; state Paused or Resumed).
type VM struct {
	State string `json:"state"`
}

// SnapshotCreate is PUT /snapshot/create (definitions.SnapshotCreateParams;
// required: mem_file_path, snapshot_path; snapshot_type Full or Diff, default
// Full). The microVM must be paused.
type SnapshotCreate struct {
	SnapshotType string `json:"snapshot_type,omitempty"`
	SnapshotPath string `json:"snapshot_path"`
	MemFilePath  string `json:"mem_file_path"`
}

// MemoryBackend is definitions.MemoryBackend (required: backend_type File or
// Uffd, backend_path). File = the memory file is mapped MAP_PRIVATE, so it
// must stay immutable while any VM restored from it runs.
type MemoryBackend struct {
	BackendType string `json:"backend_type"`
	BackendPath string `json:"backend_path"`
}

// NetworkOverride is definitions.NetworkOverride (required: iface_id,
// host_dev_name). Only the tap can change on load: the guest MAC is part of
// the device state and cannot be overridden.
type NetworkOverride struct {
	IfaceID     string `json:"iface_id"`
	HostDevName string `json:"host_dev_name"`
}

// VsockOverride is definitions.VsockOverride (required: uds_path).
type VsockOverride struct {
	UDSPath string `json:"uds_path"`
}

// SnapshotLoad is PUT /snapshot/load (definitions.SnapshotLoadParams;
// required: snapshot_path and exactly one of mem_backend / the deprecated
// mem_file_path). Only accepted by a fresh process, before any other
// configuration. Machine config (vCPUs, memory) is fixed by the snapshot.
type SnapshotLoad struct {
	SnapshotPath     string            `json:"snapshot_path"`
	MemBackend       *MemoryBackend    `json:"mem_backend,omitempty"`
	ResumeVM         bool              `json:"resume_vm,omitempty"`
	NetworkOverrides []NetworkOverride `json:"network_overrides,omitempty"`
	VsockOverride    *VsockOverride    `json:"vsock_override,omitempty"`
}

// InstanceInfo is the 200 body of GET / (definitions.InstanceInfo).
type InstanceInfo struct {
	AppName    string `json:"app_name"`
	ID         string `json:"id"`
	State      string `json:"state"` // "Not started", "Running", "Paused"
	VMMVersion string `json:"vmm_version"`
}

// Fault is the body of every Firecracker error (definitions.Error).
type Fault struct {
	FaultMessage string `json:"fault_message"`
}

// Instance states as GET / reports them.
const (
	StateNotStarted = "Not started"
	StateRunning    = "Running"
	StatePaused     = "Paused"
)
