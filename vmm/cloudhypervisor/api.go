package cloudhypervisor

// Request and response bodies of the Cloud Hypervisor REST API
// (vmm/src/api/openapi/cloud-hypervisor.yaml, components.schemas; routes under
// /api/v1, PUT for actions, GET for vm.info and vmm.ping). Only the fields
// Hearth sends are modelled; the fake (chfake) decodes exactly these with
// unknown fields rejected, which is stricter than Cloud Hypervisor itself.

// VmConfig is the body of vm.create (schemas.VmConfig; required: payload).
type VmConfig struct {
	Cpus    *CpusConfig    `json:"cpus,omitempty"`
	Memory  *MemoryConfig  `json:"memory,omitempty"`
	Payload *PayloadConfig `json:"payload"`
	Disks   []DiskConfig   `json:"disks,omitempty"`
	Net     []NetConfig    `json:"net,omitempty"`
	Rng     *RngConfig     `json:"rng,omitempty"`
	Serial  *ConsoleConfig `json:"serial,omitempty"`
	Console *ConsoleConfig `json:"console,omitempty"`
	Vsock   *VsockConfig   `json:"vsock,omitempty"`
}

// CpusConfig is schemas.CpusConfig (required: boot_vcpus, max_vcpus; both >= 1).
type CpusConfig struct {
	BootVcpus int `json:"boot_vcpus"`
	MaxVcpus  int `json:"max_vcpus"`
}

// MemoryConfig is schemas.MemoryConfig (required: size, in bytes). shared
// defaults to false; copy-on-write restore needs private (unshared) memory.
type MemoryConfig struct {
	Size   int64 `json:"size"`
	Shared *bool `json:"shared,omitempty"`
}

// PayloadConfig is schemas.PayloadConfig (kernel or firmware must be set to boot).
type PayloadConfig struct {
	Kernel    string `json:"kernel,omitempty"`
	Initramfs string `json:"initramfs,omitempty"`
	Cmdline   string `json:"cmdline,omitempty"`
	Firmware  string `json:"firmware,omitempty"`
}

// DiskConfig is schemas.DiskConfig (path; readonly default false; id).
type DiskConfig struct {
	Path     string `json:"path"`
	Readonly bool   `json:"readonly,omitempty"`
	ID       string `json:"id,omitempty"`
}

// NetConfig is schemas.NetConfig (tap, mac, id; CH creates a named tap that
// does not exist).
type NetConfig struct {
	Tap string `json:"tap,omitempty"`
	MAC string `json:"mac,omitempty"`
	ID  string `json:"id,omitempty"`
}

// RngConfig is schemas.RngConfig (required: src).
type RngConfig struct {
	Src string `json:"src"`
}

// ConsoleConfig is schemas.ConsoleConfig / SerialConfig (required: mode, one
// of Off, Pty, Tty, File, Socket, Null; file for File, socket for Socket).
type ConsoleConfig struct {
	Mode   string `json:"mode"`
	File   string `json:"file,omitempty"`
	Socket string `json:"socket,omitempty"`
}

// VsockConfig is schemas.VsockConfig (required: cid >= 3, socket). Hybrid
// vsock: host-initiated connections go to socket with "CONNECT <port>\n".
type VsockConfig struct {
	CID    uint32 `json:"cid"`
	Socket string `json:"socket"`
	ID     string `json:"id,omitempty"`
}

// VmSnapshotConfig is the body of vm.snapshot (schemas.VmSnapshotConfig):
// destination_url = "file://<existing dir>". The VM must be paused.
type VmSnapshotConfig struct {
	DestinationURL string `json:"destination_url"`
}

// RestoreConfig is the body of vm.restore (schemas.RestoreConfig; required:
// source_url). memory_restore_mode is Copy (default), OnDemand (UFFD, CH
// v52+) or CopyOnWrite (MAP_PRIVATE of the snapshot memory, newer CH only):
// omitted unless configured so older releases accept the body. resume is
// likewise omitted; the driver sends vm.resume instead.
type RestoreConfig struct {
	SourceURL         string `json:"source_url"`
	Prefault          *bool  `json:"prefault,omitempty"`
	MemoryRestoreMode string `json:"memory_restore_mode,omitempty"`
	Resume            *bool  `json:"resume,omitempty"`
}

// VmInfo is the 200 body of vm.info (schemas.VmInfo; state one of Created,
// Running, Shutdown, Paused, BreakPoint).
type VmInfo struct {
	Config           VmConfig `json:"config"`
	State            string   `json:"state"`
	MemoryActualSize int64    `json:"memory_actual_size,omitempty"`
}

// VmmPingResponse is the 200 body of vmm.ping (schemas.VmmPingResponse).
type VmmPingResponse struct {
	BuildVersion string   `json:"build_version,omitempty"`
	Version      string   `json:"version"`
	PID          int64    `json:"pid,omitempty"`
	Features     []string `json:"features,omitempty"`
}

// VM states as vm.info reports them.
const (
	StateCreated  = "Created"
	StateRunning  = "Running"
	StatePaused   = "Paused"
	StateShutdown = "Shutdown"
)

// API is the route prefix.
const API = "/api/v1"
