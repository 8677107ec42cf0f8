package pool

import (
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/hearthvm/hearth/sandbox"
)

// Shape is a size class's machine: its vCPUs and memory.
type Shape struct {
	VCPUs     int `json:"vcpus"`
	MemoryMiB int `json:"memory_mib"`
}

// sizes are the size classes, smallest first, and shapes their shapes:
// the one table of them (docs/API.md#size-classes). Every backend boots a
// class with its shape unless its operator overrides it (sim as the VM's
// cgroup limits; qemu, firecracker and cloud-hypervisor as the machine),
// the e2b API reports it (cpuCount, memoryMB), and a Sandbox's resources
// pick the smallest class whose shape holds them (KeyFor).
var (
	sizes  = []string{sandbox.SizeSmall, sandbox.SizeMedium, sandbox.SizeLarge}
	shapes = map[string]Shape{
		sandbox.SizeSmall:  {VCPUs: 1, MemoryMiB: 2048},
		sandbox.SizeMedium: {VCPUs: 4, MemoryMiB: 8192},
		sandbox.SizeLarge:  {VCPUs: 8, MemoryMiB: 16384},
	}
)

// ShapeOf is the shape of size class size ("" is small); ok is false for
// an unknown class.
func ShapeOf(size string) (s Shape, ok bool) {
	if size == "" {
		size = sandbox.SizeSmall
	}
	s, ok = shapes[size]
	return s, ok
}

// Shapes returns the table: every size class's shape, in a map of the
// caller's own.
func Shapes() map[string]Shape {
	out := make(map[string]Shape, len(shapes))
	for k, v := range shapes {
		out[k] = v
	}
	return out
}

// sizeOf is the smallest size class whose shape holds cpu and mem (nil
// or zero: unset); past the largest, the largest.
func sizeOf(cpu, mem *resource.Quantity) string {
	fits := func(q *resource.Quantity, limit resource.Quantity) bool {
		return q == nil || q.Cmp(limit) <= 0
	}
	for _, size := range sizes[:len(sizes)-1] {
		s := shapes[size]
		if fits(cpu, *resource.NewQuantity(int64(s.VCPUs), resource.DecimalSI)) && fits(mem, *resource.NewQuantity(int64(s.MemoryMiB)<<20, resource.BinarySI)) {
			return size
		}
	}
	return sizes[len(sizes)-1]
}
