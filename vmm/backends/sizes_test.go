package backends

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/pool"
	"github.com/hearthvm/hearth/vmm/cloudhypervisor"
	"github.com/hearthvm/hearth/vmm/firecracker"
	"github.com/hearthvm/hearth/vmm/qemu"
)

// TestSizes_EveryBackendBootsTheTable: the machine each VM backend boots a
// size class with, unless its operator says otherwise, is the class's
// shape in the one table, pool.Shapes (sim's cgroup limits: vmm/sim's
// TestNominal_IsTheSizeTable; e2b's report: e2b's
// TestSizes_ReportedFromTheTable).
func TestSizes_EveryBackendBootsTheTable(t *testing.T) {
	shapes := pool.Shapes()
	require.Len(t, shapes, 3)
	for size, want := range shapes {
		_, got, err := qemu.DefaultConfig("/guest").Resolve("any-template", size)
		require.NoError(t, err, size)
		require.Equal(t, want, got, "qemu %s", size)
		require.Equal(t, want, firecracker.DefaultSizes[size], "firecracker %s", size)
		require.Equal(t, want, cloudhypervisor.DefaultSizes[size], "cloud-hypervisor %s", size)
	}
	for _, sizes := range []map[string]pool.Shape{qemu.DefaultSizes, firecracker.DefaultSizes, cloudhypervisor.DefaultSizes} {
		require.Equal(t, shapes, sizes, "no backend has a class of its own")
	}
}
