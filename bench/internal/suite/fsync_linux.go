package suite

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// fdatasyncFloor measures what this disk charges one durable 4 KiB record:
// n pwrites of 4 KiB, each followed by fdatasync, in a file in dir (where
// the benchmarks' nodes keep their claim journals). It returns the
// process CPU (user+system: the kernel's part of a flush counts) and wall
// time per write. A claim at c=1 pays at least this; group commit shares it
// between concurrent claims.
func fdatasyncFloor(dir string, n int) (cpu, wall time.Duration, err error) {
	f, err := os.CreateTemp(dir, "hearth-bench-fsync-")
	if err != nil {
		return 0, 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 4096)
	c0, t0 := processCPU(), time.Now()
	for i := 0; i < n; i++ {
		if _, err := f.WriteAt(buf, int64(i%64)*4096); err != nil {
			return 0, 0, err
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return 0, 0, err
		}
	}
	return (processCPU() - c0) / time.Duration(n), time.Since(t0) / time.Duration(n), nil
}
