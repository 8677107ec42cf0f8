package sim

import (
	"testing"

	"github.com/hearthvm/hearth/pool"
)

// TestNominal_IsTheSizeTable: the limits a sandbox's cgroup gets for its
// size class are the class's shape in the one table, pool.Shapes; an
// unknown class gets small's.
func TestNominal_IsTheSizeTable(t *testing.T) {
	for size, want := range pool.Shapes() {
		cpus, mem := nominal(size)
		if cpus != want.VCPUs || mem != int64(want.MemoryMiB)<<20 {
			t.Errorf("nominal(%q) = %d CPUs, %d bytes; the table says %+v", size, cpus, mem, want)
		}
	}
	small, _ := pool.ShapeOf("small")
	if cpus, mem := nominal("huge"); cpus != small.VCPUs || mem != int64(small.MemoryMiB)<<20 {
		t.Errorf("nominal(huge) = %d, %d; want small's %+v", cpus, mem, small)
	}
}
