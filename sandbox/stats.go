package sandbox

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// SandboxStats is the answer of GET .../sandboxes/{name}/stats: the
// sandbox measured now by its node (docs/API.md#sandbox-stats), in
// kubelet's stats words (usageCoreNanoSeconds, bytes). A paused sandbox
// answers too, Paused set: whatever its node could not measure is absent.
type SandboxStats struct {
	metav1.TypeMeta `json:",inline"`
	// Name and namespace are the sandbox's.
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Timestamp is when the node measured.
	Timestamp metav1.Time `json:"timestamp"`
	// Paused is true while the sandbox is paused.
	Paused bool `json:"paused"`
	// CPUCount is the sandbox's vCPUs.
	CPUCount int32 `json:"cpuCount"`
	// CPUUsageCoreNanoSeconds is the CPU time its VM used since it started,
	// summed over cores; absent when not measurable.
	CPUUsageCoreNanoSeconds *int64 `json:"cpuUsageCoreNanoSeconds,omitempty"`
	// CPUUsageNanoCores is the CPU its VM used per second, in billionths
	// of a core (kubelet's usageNanoCores; 250000000 is kubectl's 250m),
	// averaged over Window, which ends at Timestamp and starts at the
	// node's earlier measurement of the sandbox (for any caller) — the
	// newest at least 1 s old, if one is at most 60 s old. Absent without
	// such a measurement (the same request a second later has one:
	// kubectl sandbox top asks again), while paused and when CPU time is
	// not measurable.
	CPUUsageNanoCores *int64 `json:"cpuUsageNanoCores,omitempty"`
	// Window is the span CPUUsageNanoCores is averaged over (metrics.k8s.io's
	// word), 1 s to 60 s; absent with it.
	Window *metav1.Duration `json:"window,omitempty"`
	// MemoryLimitBytes is the guest's memory; MemoryUsedBytes what the
	// guest uses of it (absent when not measured: paused, or a backend
	// that cannot tell).
	MemoryLimitBytes int64  `json:"memoryLimitBytes"`
	MemoryUsedBytes  *int64 `json:"memoryUsedBytes,omitempty"`
	// DiskLimitBytes is the sandbox's writable root file system's size and
	// DiskUsedBytes the bytes in use on it; both absent when the backend
	// cannot tell.
	DiskLimitBytes *int64 `json:"diskLimitBytes,omitempty"`
	DiskUsedBytes  *int64 `json:"diskUsedBytes,omitempty"`
}

// DeepCopyInto copies in into out.
func (in *SandboxStats) DeepCopyInto(out *SandboxStats) {
	*out = *in
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	in.Timestamp.DeepCopyInto(&out.Timestamp)
	for _, p := range []**int64{&out.CPUUsageCoreNanoSeconds, &out.CPUUsageNanoCores, &out.MemoryUsedBytes, &out.DiskLimitBytes, &out.DiskUsedBytes} {
		if *p != nil {
			v := **p
			*p = &v
		}
	}
	if in.Window != nil {
		w := *in.Window
		out.Window = &w
	}
}

// DeepCopyObject is runtime.Object's copy.
func (in *SandboxStats) DeepCopyObject() runtime.Object {
	if in == nil {
		return nil
	}
	out := new(SandboxStats)
	in.DeepCopyInto(out)
	return out
}
